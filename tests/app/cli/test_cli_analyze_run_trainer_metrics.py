"""`gmts analyze-run` puts what the trainer itself logged (TRL's trainer_state.json, verl's file
logger) in report.json and charts it in report.html, next to what GMTS computed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.cli.common import services
from app.services.run_analysis import RunAnalysisRequest, run_analysis

RUNS = Path(__file__).resolve().parents[2] / "data" / "runs"


@pytest.mark.parametrize(("run", "entropy_key"), [("trl", "entropy"), ("verl", "actor/entropy")])
def test_the_report_holds_and_charts_the_trainers_metrics(
    tmp_path: Path, run: str, entropy_key: str
) -> None:
    req = RunAnalysisRequest(RUNS / run, tmp_path / "out", "tiny-arith", tokens="none")
    outcome = run_analysis(req, services().models)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report == outcome.report
    metrics = report["trainer_metrics"]
    assert metrics["keys"]["entropy"] == entropy_key and metrics["steps"][-3:] == [1, 2, 3]
    assert all(row["entropy_mean"] > 0 for row in report["rows"])  # GMTS's, beside it
    page = (tmp_path / "out" / "report.html").read_text().replace("\\u002f", "/")  # JSON
    assert f"entropy ({'TRL' if run == 'trl' else 'verl'} log: {entropy_key})" in page
    assert "entropy mean (GMTS, recomputed with the model)" in page


def test_an_unreadable_trainer_log_is_named_in_the_report(tmp_path: Path) -> None:
    shutil.copytree(RUNS / "logged", tmp_path / "logged")
    (tmp_path / "logged" / "trainer_state.json").write_text('{"log_history": 3}')
    req = RunAnalysisRequest(tmp_path / "logged", tmp_path / "out")  # a trainer log: no model
    report = run_analysis(req, services().models).report
    assert report is not None and "trainer_metrics" not in report
    assert "no 'log_history' list" in report["trainer_metrics_error"]
    assert "metrics log was not read" in (tmp_path / "out" / "report.html").read_text()
