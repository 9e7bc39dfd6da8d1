"""GGUF files as a model source: what is refused (with the reason), the one conversion, the
checked cache (owner, permissions, SHA-256), and a converted model that analyses and trains.

The files are written by the gguf package's own writer (tests/gguf_files.py); the converted
weights are compared with transformers' own reading of the same file."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.config import RLConfig
from gmts_core.errors import ModelLoadError
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.grpo.step import grpo_step
from gmts_core.grpo.update import make_optimizer
from gmts_core.model import gguf
from gmts_core.model.loading import load_model, resolve_local_model
from tests.gguf_files import write_tiny_gguf
from tests.patience import PATIENCE_S


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("GMTS_GGUF_CACHE", str(folder))
    return folder


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    return {q: write_tiny_gguf(root / f"tiny-{q}.gguf", q) for q in ("Q8_0", "F16")}


def _conversions(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every conversion (still running it)."""
    done: list[Path] = []
    real = gguf._write_conversion

    def counted(path: Path, out: Path, digest: str) -> None:
        done.append(path)
        real(path, out, digest)

    monkeypatch.setattr(gguf, "_write_conversion", counted)
    return done


@pytest.mark.parametrize("qtype", ["Q8_0", "F16"])
def test_converted_weights_are_transformers_own_dequantization(
    qtype: str, files: dict[str, Path]
) -> None:
    path = files[qtype]
    lm = load_model(path, device="cpu")
    theirs = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).state_dict()
    ours = lm.model.state_dict()
    assert set(ours) == set(theirs)
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name]), name
    assert lm.name == str(path) and Path(lm.source).parent == gguf.cache_dir()
    assert lm.tokenizer.chat_template and "<|assistant|>" in lm.tokenizer.chat_template
    text = "The answer is 42. Héllo 😀"
    assert lm.tokenizer.decode(lm.tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_converts_once_then_loads_the_checked_cache(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _conversions(monkeypatch)
    lines: list[str] = []
    first = load_model(files["Q8_0"], device="cpu", progress=lines.append)
    assert done == [files["Q8_0"]] and any("converting" in line for line in lines)
    lines.clear()
    second = load_model(files["Q8_0"], device="cpu", progress=lines.append)
    assert done == [files["Q8_0"]] and lines == []  # no second conversion, nothing to report
    assert second.source == first.source
    again = second.model.state_dict()
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, again[name]), name


def _convert_after(barrier: Any, path: str, cache: str, out: Any) -> None:
    """A second process's conversion of ``path`` into ``cache``, started with the other's."""
    os.environ["GMTS_GGUF_CACHE"] = cache
    lines: list[str] = []
    barrier.wait(PATIENCE_S)
    folder = gguf.converted_folder(Path(path), progress=lines.append)
    out.put((str(folder), any(line.startswith("converting") for line in lines)))


def test_two_processes_converting_one_file_convert_it_once(
    files: dict[str, Path], _cache: Path
) -> None:
    """A server and a command (or two test workers) loading one GGUF file for the first time
    at once: one converts, the other waits for it and loads its folder, which nobody replaces
    while it is read (before, both converted, and the second replaced the first's folder)."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    args = (barrier, str(files["F16"]), str(_cache), out)
    procs = [ctx.Process(target=_convert_after, args=args) for _ in range(2)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(PATIENCE_S)
        assert proc.exitcode == 0
    assert len({folder for folder, _ in results}) == 1
    assert sorted(converted for _, converted in results) == [False, True]
    assert gguf.verify(Path(results[0][0]), gguf.source_sha256(files["F16"])) is None


def _tamper_bytes(folder: Path) -> None:
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))


def _tamper_keeping_times(folder: Path) -> None:
    """Change one byte and put the file's access and modification times back: only its
    status-change time (which user space cannot set back) tells."""
    weights = folder / "model.safetensors"
    before = weights.stat()
    _tamper_bytes(folder)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert weights.stat().st_mtime_ns == before.st_mtime_ns


def _group_writable(folder: Path) -> None:
    os.chmod(folder / "config.json", 0o664)


def _extra_file(folder: Path) -> None:
    (folder / "modeling_evil.py").write_text("raise SystemExit\n")


def _no_record(folder: Path) -> None:
    (folder / gguf.RECORD).unlink()


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (_tamper_bytes, "does not match its recorded SHA-256"),
        (_tamper_keeping_times, "does not match its recorded SHA-256"),
        (_group_writable, "writable by its group or by others"),
        (_extra_file, "other files than its record lists"),
        (_no_record, "is missing"),
    ],
)
def test_a_spoiled_conversion_is_refused_and_redone(
    spoil, reason: str, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    path = files["Q8_0"]
    folder = Path(load_model(path, device="cpu").source)
    spoil(folder)
    assert reason in (gguf.verify(folder, gguf.source_sha256(path)) or "")
    done = _conversions(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="gmts_core.model.gguf"):
        load_model(path, device="cpu")
    assert done == [path] and reason in caplog.text
    assert gguf.verify(folder, gguf.source_sha256(path)) is None


def test_a_checked_folder_is_hashed_only_where_a_file_changed(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = files["Q8_0"]
    folder = Path(load_model(path, device="cpu").source)
    digest = gguf.source_sha256(path)
    hashed: list[str] = []
    real = gguf.sha256_file

    def counted(target: Path) -> str:
        hashed.append(target.name)
        return real(target)

    monkeypatch.setattr(gguf, "sha256_file", counted)
    assert gguf.verify(folder, digest) is None and hashed == []  # stamps unchanged: no hashing
    weights = folder / "model.safetensors"
    copy = folder.parent / "copy"
    copy.write_bytes(weights.read_bytes())
    copy.chmod(0o644)
    os.replace(copy, weights)  # the same bytes in a new file (a restore): hashed once, re-stamped
    assert gguf.verify(folder, digest) is None and hashed == ["model.safetensors"]
    assert gguf.verify(folder, digest) is None and hashed == ["model.safetensors"]
    record = json.loads((folder / gguf.RECORD).read_text())
    del record["stamps"]  # a record written before stamps existed: every file hashed once
    (folder / gguf.RECORD).write_text(json.dumps(record))
    hashed.clear()
    assert gguf.verify(folder, digest) is None and sorted(hashed) == sorted(record["files"])
    hashed.clear()
    assert gguf.verify(folder, digest) is None and hashed == []
    left = sorted(p.name for p in folder.parent.iterdir() if p.name != gguf.LOCK_NAME)
    assert left == [folder.name]  # no leftovers


def test_a_cache_folder_others_may_write_is_not_used(files: dict[str, Path], _cache: Path) -> None:
    _cache.mkdir(mode=0o777)
    os.chmod(_cache, 0o777)
    with pytest.raises(ModelLoadError, match="writable by its group or by others"):
        load_model(files["Q8_0"], device="cpu")


def test_unreadable_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    unknown_type = write_tiny_gguf(tmp_path / "q81.gguf", "Q8_1")
    with pytest.raises(ModelLoadError, match="Q8_1 cannot be de-quantized"):
        load_model(unknown_type, device="cpu")
    unknown_arch = write_tiny_gguf(tmp_path / "arch.gguf", "F32", architecture="nosucharch")
    with pytest.raises(ModelLoadError, match="architecture 'nosucharch'"):
        load_model(unknown_arch, device="cpu")
    not_gguf = tmp_path / "fake.gguf"
    not_gguf.write_bytes(b"this is not a GGUF file at all" * 10)
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        load_model(not_gguf, device="cpu")
    assert not any(gguf.cache_dir().glob("*-*"))  # nothing was cached for any of them


def test_a_folder_holding_one_gguf_file_is_a_model_source(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    os.link(files["Q8_0"], folder / "model.gguf")
    assert gguf.find_gguf(folder) == (folder / "model.gguf").resolve()
    assert resolve_local_model("one", [tmp_path]) == folder.resolve()
    assert load_model(folder, device="cpu").info()["architecture"] == "LlamaForCausalLM"
    os.link(files["F16"], folder / "other.gguf")
    with pytest.raises(ModelLoadError, match="several GGUF files"):
        gguf.find_gguf(folder)
    (tmp_path / "plain").mkdir()
    assert gguf.find_gguf(tmp_path / "plain") is None


def test_a_gguf_model_analyses_and_trains(files: dict[str, Path]) -> None:
    lm = load_model(files["Q8_0"], device="cpu")
    answers = ["The answer is 42.", "47+38 = 85"]
    result = analyze(
        lm, [GroupInput("Q: 47+38=?", answers=answers, rewards=[0.0, 1.0])], AnalysisConfig()
    )
    assert [len(a.tokens) for a in result.groups[0].answers] == [
        len(lm.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers
    ]
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    config = dataclasses.replace(RLConfig(group_size=4, max_new_tokens=6), max_grad_norm=1e9)
    prompts = [RLPrompt("The answer is", "[aeiou]", "regex")]
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    step = grpo_step(policy, make_optimizer(policy, config), prompts, config, seed=3)
    assert step.batch.num_tokens > 0
    if float(step.batch.advantages.abs().sum()) > 0:  # a group with signal moves the weights
        assert any(not torch.equal(p, before[n]) for n, p in policy.model.named_parameters())
