"""The trainers' own metrics logs: TRL's trainer_state.json (a real GRPOTrainer run's) and
verl's file-logger JSONL (written by verl's Tracking: scripts/make_verl_metrics_fixture.py)
read into per-step series; hostile, oversized and malformed logs refused with a clear error
or bounded."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from gmts_core.runs import RunFormatError, RunLimitError, RunLimits, find_trainer_metrics
from gmts_core.runs.errors import UnsafeRunFileError
from gmts_core.runs.trainer_metrics import MAX_POINTS
from gmts_core.runs.trl_state import TRLStateReader
from gmts_core.runs.verl_tracking import VerlTrackingReader

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
TRL_STATE = DATA / "trl" / "trainer_state.json"
VERL_LOG = DATA / "verl" / "gmts-fixture" / "tiny-arith-grpo.jsonl"


def test_trl_trainer_state_series_are_the_logged_values_by_step() -> None:
    history = json.loads(TRL_STATE.read_text())["log_history"]
    per_step = [h for h in history if "entropy" in h]
    m = find_trainer_metrics(DATA / "trl", RunLimits())
    assert m is not None and m.format == "trl_trainer_state" and m.source.endswith(TRL_STATE.name)
    assert m.steps == [h["step"] for h in per_step] == [1, 2, 3]
    assert m.series["entropy"] == [h["entropy"] for h in per_step]
    assert m.series["reward"] == [h["reward"] for h in per_step]
    assert m.series["reward_std"] == [h["reward_std"] for h in per_step]
    assert m.series["response_length"] == [h["completions/mean_length"] for h in per_step]
    assert m.keys["entropy"] == "entropy" and m.keys["response_length"] == "completions/mean_length"
    assert "kl" not in m.series  # not logged without a KL term
    assert "train_runtime" in m.names and "step" not in m.names and m.num_steps == 3


def test_trl_state_from_the_newest_checkpoint_unless_saved_at_the_top(tmp_path: Path) -> None:
    state = json.loads(TRL_STATE.read_text())
    for n, upto in ((2, 2), (10, 3)):  # checkpoint-10 sorts before checkpoint-2 by name
        (tmp_path / f"checkpoint-{n}").mkdir()
        part = {**state, "log_history": state["log_history"][:upto]}
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps(part))
    m = find_trainer_metrics(tmp_path, RunLimits())
    assert m is not None and "checkpoint-10" in m.source and m.steps == [1, 2, 3]
    (tmp_path / "trainer_state.json").write_text(
        json.dumps({**state, "log_history": state["log_history"][:1]})
    )
    assert find_trainer_metrics(tmp_path, RunLimits()).steps == [1]  # type: ignore[union-attr]


def test_verl_file_logger_series_are_the_logged_values_by_step() -> None:
    lines = [json.loads(s) for s in VERL_LOG.read_text().splitlines()]
    assert all(set(line) == {"step", "data"} for line in lines)  # verl's FileLogger format
    m = find_trainer_metrics(DATA / "verl", RunLimits())
    assert m is not None and m.format == "verl_file_logger" and m.source.endswith(VERL_LOG.name)
    assert m.steps == [line["step"] for line in lines] == [0, 1, 2, 3]
    data = {line["step"]: line["data"] for line in lines}
    assert m.series["entropy"] == [data[s].get("actor/entropy") for s in m.steps]
    assert m.series["entropy"][0] is None  # step 0: the validation line only
    assert m.series["reward"] == [data[s].get("critic/score/mean") for s in m.steps]
    assert m.keys == {
        "reward": "critic/score/mean",
        "entropy": "actor/entropy",
        "response_length": "response_length/mean",
    }
    # the same run's rollouts: verl's score mean is the mean of the dump's scores
    scores = [json.loads(s)["score"] for s in (DATA / "verl" / "1.jsonl").read_text().splitlines()]
    assert m.series["reward"][1] == pytest.approx(sum(scores) / len(scores))


def test_lines_of_one_step_merge_and_bad_values_are_left_out(tmp_path: Path) -> None:
    log = tmp_path / "exp.jsonl"
    rows = [
        {"step": 1, "data": {"actor/entropy": 0.5, "critic/score/mean": "high"}},
        {"step": 1, "data": {"critic/score/mean": 0.25, "actor/grad_norm": True}},
        {"step": 2, "data": {"actor/entropy": None, "critic/score/mean": 1e300}},
    ]
    log.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step": 3, "data": {"actor/ent')
    m = find_trainer_metrics(tmp_path, RunLimits())
    assert m is not None and m.steps == [1, 2]  # the half-written last line is dropped
    assert m.series == {"reward": [0.25, None], "entropy": [0.5, None]}
    log.write_text(log.read_text().replace("1e300", "NaN"))  # orjson writes NaN as null; NaN too
    assert find_trainer_metrics(tmp_path, RunLimits()).series["reward"] == [0.25, None]  # type: ignore[union-attr]


def test_a_long_log_is_thinned_for_charts_first_and_last_kept(tmp_path: Path) -> None:
    lines = (json.dumps({"step": s, "data": {"actor/entropy": s / 10}}) for s in range(5000))
    (tmp_path / "exp.jsonl").write_text("\n".join(lines) + "\n")
    m = find_trainer_metrics(tmp_path, RunLimits())
    assert m is not None and len(m.steps) == MAX_POINTS and m.num_steps == 5000
    assert (m.steps[0], m.steps[-1]) == (0, 4999)
    assert m.series["entropy"][-1] == pytest.approx(499.9)


def trl_run(tmp_path: Path, text: str | bytes) -> Path:
    file = tmp_path / "trainer_state.json"
    file.write_bytes(text if isinstance(text, bytes) else text.encode())
    return tmp_path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"log_history": [{"step": 1, "loss": 0.1}', "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"global_step": 3}', "no 'log_history' list"),
        ('{"log_history": [{"loss": 0.1}]}', r"log_history\[0\] has no 'step'"),
        ('{"log_history": [{"step": "one", "loss": 0.1}]}', "step number must be an integer"),
        ('{"log_history": [{"step": 1e400}]}', "step number must be an integer"),
        ('{"log_history": [3]}', r"log_history\[0\] is not an object"),
        ('{"log_history": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON|nests deeper"),
        ('{"log_history": [{"step": 1, "x": "\\ud800"}]}', "lone surrogate"),
        (b'{"log_history": [{"step": 1, "x": "\xff"}]}', "not valid utf-8"),
    ],
)
def test_malformed_trainer_state_is_refused_naming_the_file(
    tmp_path: Path, text: str | bytes, message: str
) -> None:
    with pytest.raises(RunFormatError, match=message) as err:
        find_trainer_metrics(trl_run(tmp_path, text), RunLimits())
    assert str(err.value).startswith(str(tmp_path / "trainer_state.json"))


def test_oversized_logs_are_refused_by_their_limits(tmp_path: Path) -> None:
    history = [{"step": s, "entropy": 0.1} for s in range(50)]
    run = trl_run(tmp_path, json.dumps({"log_history": history}))
    with pytest.raises(RunLimitError, match="max_step_bytes"):
        find_trainer_metrics(run, RunLimits(max_step_bytes=100))
    with pytest.raises(RunLimitError, match="max_run_steps"):
        find_trainer_metrics(run, RunLimits(max_run_steps=10))
    verl = tmp_path / "verl"
    verl.mkdir()
    (verl / "exp.jsonl").write_text(
        json.dumps({"step": 1, "data": {"actor/entropy": 0.1, "pad": "x" * 5000}}) + "\n"
    )
    with pytest.raises(RunLimitError, match="max_line_bytes"):
        find_trainer_metrics(verl, RunLimits(max_line_bytes=1000))
    with pytest.raises(RunLimitError, match="max_file_bytes"):
        find_trainer_metrics(verl, RunLimits(max_file_bytes=1000))


def test_a_bad_line_in_a_verl_log_names_its_line(tmp_path: Path) -> None:
    good = json.dumps({"step": 1, "data": {"actor/entropy": 0.1}})
    (tmp_path / "exp.jsonl").write_text(f'{good}\n{{"step": 2, "data": [1]}}\n{good}\n')
    with pytest.raises(RunFormatError, match=r"exp\.jsonl:2: expected a verl file-logger line"):
        find_trainer_metrics(tmp_path, RunLimits())
    (tmp_path / "exp.jsonl").write_text(f'{good}\n{{"step": 2, "data": {{"a": 1}}\n{good}\n')
    with pytest.raises(RunFormatError, match=r"exp\.jsonl:2: not valid JSON"):
        find_trainer_metrics(tmp_path, RunLimits())


def test_other_jsonl_files_and_step_files_are_no_verl_log(tmp_path: Path) -> None:
    shutil.copytree(DATA / "verl", tmp_path / "run", ignore=shutil.ignore_patterns("gmts-fixture"))
    (tmp_path / "run" / "notes.jsonl").write_text('{"prompt": "p", "completions": ["a"]}\n')
    assert find_trainer_metrics(tmp_path / "run", RunLimits()) is None
    for name in ("roll", "areal", "run.jsonl"):
        assert find_trainer_metrics(DATA / name, RunLimits()) is None


def test_links_out_of_the_run_root_and_fifos_are_never_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(TRL_STATE, outside / "trainer_state.json")
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "run" / "trainer_state.json").symlink_to(outside / "trainer_state.json")
    limits = replace(RunLimits(), root=str(root))
    with pytest.raises(UnsafeRunFileError):
        find_trainer_metrics(root / "run", limits)
    os.unlink(root / "run" / "trainer_state.json")
    os.mkfifo(root / "run" / "trainer_state.json")  # opening it would block: refused first
    with pytest.raises(UnsafeRunFileError, match="not a file"):
        find_trainer_metrics(root / "run", limits)
    os.unlink(root / "run" / "trainer_state.json")
    (root / "run" / "p").mkdir()
    os.mkfifo(root / "run" / "p" / "exp.jsonl")  # a FIFO where a verl log could be: skipped
    assert find_trainer_metrics(root / "run", limits) is None


def test_readers_locate_a_file_given_directly() -> None:
    assert TRLStateReader().locate(TRL_STATE, RunLimits()) == TRL_STATE
    assert VerlTrackingReader().locate(VERL_LOG, RunLimits()) == VERL_LOG
    assert VerlTrackingReader().locate(DATA / "verl" / "1.jsonl", RunLimits()) is None
