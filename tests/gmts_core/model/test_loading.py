"""Model loading: Llama / Qwen2 / GPT-2 folders, pad tokens, dtypes, safe local names, cache."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from gmts_core.errors import InvalidInputError, ModelLoadError
from gmts_core.model.loading import (
    LoadedModel,
    ModelCache,
    ensure_pad_token,
    is_hub_id,
    load_model,
    one_thread,
    resolve_dtype,
    resolve_local_model,
)
from tests.tiny_models import byte_level_bpe_tokenizer

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
}


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_loads_each_architecture_frozen(arch: str, tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm(arch)
    assert type(lm.model).__name__ == ARCHITECTURES[arch]
    assert not lm.model.training
    assert not any(p.requires_grad for p in lm.model.parameters())  # never trained in place
    assert lm.tokenizer.pad_token_id is not None
    assert lm.vocab_size == len(lm.tokenizer)
    info = lm.info()
    assert info["architecture"] == ARCHITECTURES[arch]
    assert info["dtype"] == "float32" and info["device"] == "cpu"
    assert info["parameters"] == sum(p.numel() for p in lm.model.parameters()) > 0


def test_the_load_time_probe_runs_in_one_thread_and_the_count_comes_back(
    tiny_model_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gmts_core.model.loading as loading

    seen: list[int] = []
    real = loading.check_head_path

    def probe(model: object) -> object:
        seen.append(torch.get_num_threads())
        return real(model)

    monkeypatch.setattr(loading, "check_head_path", probe)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        load_model(tiny_model_dir("llama"), device="cpu")
        assert seen == [1] and torch.get_num_threads() == 2
        with pytest.raises(RuntimeError, match="inside"), one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 2  # restored after an error too
    finally:
        torch.set_num_threads(before)


def test_dtype_choice(tiny_model_dir: Callable[[str], Path]) -> None:
    lm = load_model(tiny_model_dir("gpt2"), device="cpu", dtype="bfloat16")
    assert lm.dtype == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(InvalidInputError, match="float32"):
        resolve_dtype("float8", torch.device("cpu"))


def test_missing_pad_token_becomes_eos(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path]
) -> None:
    folder = tmp_path / "nopad"
    shutil.copytree(tiny_model_dir("gpt2"), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("pad_token", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    special = folder / "special_tokens_map.json"
    if special.exists():
        data = json.loads(special.read_text())
        data.pop("pad_token", None)
        special.write_text(json.dumps(data))
    lm = load_model(folder, device="cpu", dtype="float32")
    assert lm.tokenizer.pad_token_id == lm.tokenizer.eos_token_id is not None


def test_ensure_pad_token_without_eos_is_an_error() -> None:
    tok = byte_level_bpe_tokenizer(vocab_size=300)
    tok.pad_token = None
    tok.eos_token = None
    with pytest.raises(ModelLoadError, match="neither a pad nor an EOS"):
        ensure_pad_token(tok)


def test_safetensors_only(tmp_path: Path, tiny_model_dir: Callable[[str], Path]) -> None:
    """A folder with only a pickled checkpoint is refused (pickles can run code)."""
    folder = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir("gpt2"), folder)
    state = {k: torch.zeros(1) for k in ("a",)}
    torch.save(state, folder / "pytorch_model.bin")
    for f in folder.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(folder, device="cpu")


def test_folder_without_a_model_is_a_load_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError):
        load_model(tmp_path / "empty", device="cpu")


# --- local names that must not escape the allowed roots --------------------------------------


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """An allowed root with a model folder, and an outside folder that also looks like a model."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    for folder in (root / "m", root / "org" / "m2", outside / "secret"):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    return root, outside


def test_resolves_names_inside_the_root(roots: tuple[Path, Path]) -> None:
    root, _ = roots
    assert resolve_local_model("m", [root]) == (root / "m").resolve()
    assert resolve_local_model("org/m2", [root]) == (root / "org" / "m2").resolve()
    assert resolve_local_model(str((root / "m").resolve()), [root]) == (root / "m").resolve()
    assert resolve_local_model("org", [root]) is None  # no config.json
    assert resolve_local_model("missing", [root]) is None


@pytest.mark.parametrize(
    "name", ["../outside/secret", "m/../../outside/secret", "./../outside/secret"]
)
def test_dotdot_cannot_escape(roots: tuple[Path, Path], name: str) -> None:
    root, _ = roots
    assert resolve_local_model(name, [root]) is None


def test_absolute_path_outside_the_roots_is_refused(roots: tuple[Path, Path]) -> None:
    root, outside = roots
    assert resolve_local_model(str(outside / "secret"), [root]) is None
    assert resolve_local_model("/etc", [root]) is None


def test_symlink_escape_is_refused(roots: tuple[Path, Path]) -> None:
    root, outside = roots
    (root / "link").symlink_to(outside / "secret", target_is_directory=True)
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    assert resolve_local_model("link", [root]) is None
    assert resolve_local_model("dirlink/secret", [root]) is None


def test_second_root_is_searched(roots: tuple[Path, Path]) -> None:
    root, outside = roots
    assert resolve_local_model("secret", [root, outside]) == (outside / "secret").resolve()


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("gpt2", True),
        ("Qwen/Qwen2.5-Math-1.5B", True),
        ("meta-llama/Llama-3.2-1B_v2.0", True),
        ("../etc/passwd", False),
        ("/abs/path", False),
        ("org/../x", False),
        ("a/b/c", False),
        ("", False),
        (".hidden", False),
        ("org/", False),
        ("has space/x", False),
        ("org/name:tag", False),
        ("~user/x", False),
    ],
)
def test_is_hub_id(name: str, ok: bool) -> None:
    assert is_hub_id(name) is ok


def test_model_cache_loads_once_and_evicts(tiny_model_dir: Callable[[str], Path]) -> None:
    cache = ModelCache(max_models=1)
    a = cache.get("a", tiny_model_dir("gpt2"), device="cpu", dtype="float32")
    assert cache.get("a", tiny_model_dir("gpt2"), device="cpu", dtype="float32") is a
    assert cache.peek("a", tiny_model_dir("gpt2")) is a
    cache.get("b", tiny_model_dir("qwen2"), device="cpu", dtype="float32")
    assert cache.loaded_names() == ["b"]
    assert cache.peek("a", tiny_model_dir("gpt2")) is None
