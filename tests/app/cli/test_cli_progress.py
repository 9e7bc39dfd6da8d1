"""Long commands say where they are when their output is not a terminal (#38): `gmts compare`,
`train-demo`, `analyze-run` and `gradcheck` print one ``[done/total] label`` line per step (or
stage) to stderr, and stdout keeps only the result. CliRunner's streams are not terminals, as a
pipe or a log file is not."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from app.cli import load_commands
from tests.app.api_helpers import TINY

RUNS = Path(__file__).resolve().parents[2] / "data" / "runs"
LINE = re.compile(r"^\[(\d+)/(\d+)\] (.*)$", re.M)


def _invoke(*args: str):  # noqa: ANN202
    result = CliRunner().invoke(load_commands(), list(args))
    assert result.exit_code == 0, result.output
    assert not LINE.search(result.stdout), "progress belongs on stderr, not with the result"
    return result


def _lines(stderr: str) -> list[tuple[int, int, str]]:
    return [(int(d), int(t), label) for d, t, label in LINE.findall(stderr)]


def test_compare_prints_a_line_per_training_step(model_root: Path, tmp_path: Path) -> None:
    result = _invoke(
        "compare", "--model", str(model_root / TINY), "--methods", "entropy,gmts",
        "--steps", "2", "--seeds", "1", "--group-size", "2", "--prompts-per-step", "1",
        "--max-new-tokens", "4", "--eval-problems", "2", "--out", str(tmp_path),
    )  # fmt: skip
    lines = _lines(result.stderr)
    assert [(d, t) for d, t, _ in lines] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    labels = [label.split(":")[0] for _, _, label in lines]
    assert labels == [f"{m} seed 0 step {s}" for m in ("entropy", "gmts") for s in (1, 2)]
    assert "final held-out accuracy" in (tmp_path / "table.md").read_text()


def test_train_demo_prints_a_line_per_optimizer_step(tmp_path: Path) -> None:
    out = tmp_path / "retrained"
    result = _invoke("train-demo", "--out", str(out), "--steps", "3", "--batch-size", "2")
    lines = _lines(result.stderr)
    assert [(d, t) for d, t, _ in lines] == [(1, 3), (2, 3), (3, 3)]
    assert all(re.fullmatch(r"loss \d+\.\d{4}", label) for _, _, label in lines)
    assert (out / "config.json").is_file() and f"saved {out}" in result.stdout


def test_analyze_run_prints_a_line_per_step(tmp_path: Path) -> None:
    out = tmp_path / "report"
    args = ("analyze-run", str(RUNS / "trl"), "--steps", "1:2", "--tokens", "none", "-o", str(out))
    lines = _lines(_invoke(*args).stderr)
    assert lines == [(0, 2, "steps to analyse"), (1, 2, "step 1"), (2, 2, "step 2")]
    assert [row["step"] for row in json.loads((out / "report.json").read_text())["rows"]] == [1, 2]
    # --resume: the steps already analysed are counted, not analysed again
    lines = _lines(_invoke(*args, "--resume").stderr)
    assert lines == [
        (0, 2, "steps to analyse"),
        (1, 2, "already analysed"),
        (2, 2, "already analysed"),
    ]


def test_gradcheck_prints_a_line_per_stage(model_root: Path) -> None:
    result = _invoke(
        "gradcheck", "--model", str(model_root / TINY), "--prompt", "Q: 47+38=?",
        "--answer", "answer 85", "--answer", "answer 75", "--rewards", "1,0",
    )  # fmt: skip
    lines = _lines(result.stderr)
    total = lines[-1][1]
    assert [d for d, _, _ in lines] == list(range(1, total + 1))
    assert all(t == total for _, t, _ in lines)
    assert lines[-1][2] == "exact per-token gradients"
    assert "How good is the proxy?" in result.stdout
