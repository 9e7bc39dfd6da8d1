"""`gmts compare` via the compare service: compare.json, a self-contained compare.html, table.md,
intervals that stay where accuracies live, the conclusion, and progress lines off a terminal."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from app.cli import load_commands
from app.cli.common import progress_lines
from tests.tiny_models import save_tiny_model


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("cmp") / "llama")


def _args(folder: Path, out: Path, *extra: str) -> list[str]:
    return [
        "compare", "--model", str(folder), "--group-size", "2", "--prompts-per-step", "1",
        "--max-new-tokens", "4", "--out", str(out), *extra,
    ]  # fmt: skip


def test_cli_writes_json_self_contained_html_and_table(folder: Path, tmp_path: Path) -> None:
    cli = load_commands()
    assert "compare" in [c.name for c in cli.registered_commands]

    extra = ("--methods", "all,gmts", "--steps", "1", "--seeds", "1", "--eval-problems", "2")
    run = CliRunner().invoke(cli, _args(folder, tmp_path, *extra))
    assert run.exit_code == 0, run.output
    body = json.loads((tmp_path / "compare.json").read_text())
    assert [row["method"] for row in body["table"]] == ["all", "gmts"]
    page = (tmp_path / "compare.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "plotly" in page.lower() and "<script src=" not in page  # plotly.js inline
    assert all(m in page for m in ("all", "gmts"))
    assert body["conclusions"][0] in page
    table = (tmp_path / "table.md").read_text()
    assert "final held-out accuracy" in table
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) == 1 + 1 + 2  # header, rule, one row per method
    assert body["conclusions"][0] in table and body["conclusions"][0] in run.output
    # one seed: no verdict anywhere it prints (issue 46), and the table says why
    assert any(w in body["conclusions"][0] for w in ("no verdict", "nothing to separate"))
    for word in ("separable", "is better", "differs", "within noise"):
        assert word not in run.output and word not in table
    assert all(row["within_noise"] is None for row in body["table"] if row["paired_difference"])
    bad = CliRunner().invoke(cli, ["compare", "--model", str(folder), "--methods", "nope"])
    assert bad.exit_code == 2 and "valid" in bad.output


def test_two_seeds_intervals_in_unit_range_and_one_progress_line_per_step(
    folder: Path, tmp_path: Path
) -> None:
    extra = ("--methods", "entropy,gmts,random", "--steps", "2", "--seeds", "2")
    noise = ("--seed-offset", "5", "--eval-seed", "7", "--eval-samples", "2")
    run = CliRunner().invoke(
        load_commands(),
        _args(folder, tmp_path, *extra, *noise, "--eval-problems", "6", "--ratio", "0.5"),
    )
    assert run.exit_code == 0, run.output
    body = json.loads((tmp_path / "compare.json").read_text())
    assert sorted({r["seed"] for r in body["runs"]}) == [5, 6]  # the training-seed offset
    assert (body["config"]["eval_seed"], body["config"]["eval_samples"]) == (7, 2)
    for sentence in body["conclusions"]:  # each verdict comes with its power advice
        assert "Power: " in sentence or "nothing to separate" in sentence
    for row in body["table"]:
        acc = row["final_accuracy"]
        assert 0.0 <= acc["ci_low"] <= acc["mean"] <= acc["ci_high"] <= 1.0
        assert row["interval_over"] == "seeds and problems"
    # CliRunner's output is not a terminal: one plain line per step of every run, in order
    total = 2 * 2 * 3
    done = [
        int(m) for m in re.findall(rf"^\[(\d+)/{total}\] \w+ seed [56] step \d", run.output, re.M)
    ]
    assert done == list(range(1, total + 1))


def test_identical_runs_give_a_paired_difference_of_exactly_zero(
    folder: Path, tmp_path: Path
) -> None:
    # at ratio 1 every method trains on every token: the same runs, seed by seed
    extra = ("--methods", "entropy,gmts", "--steps", "2", "--seeds", "2", "--ratio", "1")
    run = CliRunner().invoke(
        load_commands(), _args(folder, tmp_path, *extra, "--eval-problems", "6")
    )
    assert run.exit_code == 0, run.output
    gmts = json.loads((tmp_path / "compare.json").read_text())["table"][1]
    diff = gmts["paired_difference"]
    assert diff == {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    assert gmts["within_noise"] is True
    assert "the same score on every seed and problem" in gmts["conclusion"]


def test_task_mix_is_kept_in_the_json_and_an_unknown_one_is_refused(
    folder: Path, tmp_path: Path
) -> None:
    extra = ("--methods", "gmts", "--steps", "1", "--seeds", "1", "--eval-problems", "2")
    run = CliRunner().invoke(
        load_commands(), _args(folder, tmp_path, *extra, "--task-mix", "hard-mix")
    )
    assert run.exit_code == 0, run.output
    assert json.loads((tmp_path / "compare.json").read_text())["config"]["task_mix"] == "hard-mix"
    bad = CliRunner().invoke(load_commands(), _args(folder, tmp_path, "--task-mix", "easy"))
    assert bad.exit_code == 2 and "unknown task mix 'easy'; valid: default, hard-mix" in bad.output


class _Pipe(io.StringIO):
    """A non-terminal stream that records what had been written at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


def test_progress_lines_are_flushed_as_each_step_ends() -> None:
    pipe = _Pipe()
    console = Console(file=pipe, force_terminal=False)
    tick = progress_lines(console)
    tick(1, 2, "gmts seed 0 step 1: reward 0.50")
    assert pipe.flushed[-1] == "[1/2] gmts seed 0 step 1: reward 0.50\n"
    tick(2, 2, "gmts seed 0 step 2: reward 0.25")
    assert pipe.flushed[-1].splitlines()[-1] == "[2/2] gmts seed 0 step 2: reward 0.25"
