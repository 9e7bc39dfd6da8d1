"""`gmts analyze-run RUN --model none`: a dump that logs per-token numbers (the prime-rl
export) is reported from them alone: no model loaded, the entropy selections over the trained
tokens, the train/inference mismatch per step, report.json and report.html written."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import app.cli.analyze_run  # noqa: F401  (registers the command)
from app.cli._app import cli

RUNS = Path(__file__).resolve().parents[2] / "data" / "runs"


def test_a_dump_is_reported_from_its_own_numbers(tmp_path: Path) -> None:
    args = ["analyze-run", str(RUNS / "prime_rl"), "-o", str(tmp_path), "--model", "none"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mode"] == "logged" and report["model"] is None
    assert report["methods"] == ["entropy", "gmts_entropy"]
    for row in report["rows"]:
        assert row["untrained_tokens"] > 0 and row["numbers"]["entropy"] == "logged"
        assert row["mismatch"]["trainer_side"] == "logged"
    assert (tmp_path / "report.html").is_file()


def test_a_dump_without_per_token_numbers_still_needs_a_model(tmp_path: Path) -> None:
    args = ["analyze-run", str(RUNS / "verl"), "-o", str(tmp_path), "--model", "none"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and "needs --model" in result.output
