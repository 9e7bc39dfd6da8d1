"""The Runs tab charts what the trainer itself measured (TRL's trainer_state.json, verl's file
logger) next to what GMTS read from the rollouts: the chart's data are the logged numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.services.container import build_services
from app.ui.tabs.runs.view import trainer_metrics_figure, trainer_metrics_note
from tests.app.api_helpers import make_settings
from tests.app.ui.tabs.runs.conftest import DATA


def traces(fig) -> dict:  # type: ignore[no-untyped-def]
    return {t.name: t for t in fig.data}


def test_the_trl_runs_chart_holds_the_entropy_trl_logged(services) -> None:  # type: ignore[no-untyped-def]
    overview = services.runs.overview("trl").model_dump()
    history = json.loads((DATA / "trl" / "trainer_state.json").read_text())["log_history"]
    logged = [h for h in history if "entropy" in h]
    fig = trainer_metrics_figure(overview)
    assert fig is not None
    by_name = traces(fig)
    entropy = by_name["entropy (TRL log: entropy)"]
    assert list(entropy.x) == [h["step"] for h in logged]
    assert list(entropy.y) == [h["entropy"] for h in logged]
    assert entropy.yaxis == "y2"  # its own axis, in nats
    assert list(by_name["reward (TRL log: reward)"].y) == [h["reward"] for h in logged]
    gmts = by_name["reward mean (GMTS, from the rollouts)"]  # what GMTS read, beside it
    assert list(gmts.y) == [o["reward_mean"] for o in overview["overview"]]
    # the trainer's reward is the mean of the rewards in its own completions files
    assert list(gmts.y) == pytest.approx([h["reward"] for h in logged], abs=1e-6)
    note = trainer_metrics_note(overview)
    assert "trl/trainer_state.json" in note and "entropy = `entropy`" in note


def test_the_verl_runs_chart_holds_the_entropy_verl_logged(services) -> None:  # type: ignore[no-untyped-def]
    overview = services.runs.overview("verl").model_dump()
    log = DATA / "verl" / "gmts-fixture" / "tiny-arith-grpo.jsonl"
    lines = [json.loads(s) for s in log.read_text().splitlines()]
    fig = trainer_metrics_figure(overview)
    assert fig is not None
    entropy = traces(fig)["entropy (verl log: actor/entropy)"]
    assert list(entropy.y) == [line["data"].get("actor/entropy") for line in lines]
    assert "verl/gmts-fixture/tiny-arith-grpo.jsonl" in trainer_metrics_note(overview)


def test_a_run_without_a_trainer_log_says_where_one_would_be(services) -> None:  # type: ignore[no-untyped-def]
    overview = services.runs.overview("roll").model_dump()
    assert overview["trainer_metrics"] is None and trainer_metrics_figure(overview) is None
    assert "trainer_state.json" in trainer_metrics_note(overview)


def test_an_unreadable_trainer_log_is_named_and_the_run_still_opens(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "completions").mkdir(parents=True)
    for f in (DATA / "trl" / "completions").iterdir():
        (run / "completions" / f.name).write_bytes(f.read_bytes())
    (run / "trainer_state.json").write_text('{"log_history": [{"step": 1, "entropy": ')
    own = build_services(make_settings(tmp_path, run_roots=[tmp_path], default_model="tiny-arith"))
    overview = own.runs.overview("run").model_dump()
    assert overview["steps"] == [1, 2, 3] and overview["trainer_metrics"] is None
    error = overview["trainer_metrics_error"]
    assert error.startswith("run/trainer_state.json: not valid JSON")  # relative to the root
    assert str(tmp_path) not in error
    assert "not read" in trainer_metrics_note(overview)


def test_opening_a_run_in_the_tab_draws_the_trainers_entropy(services) -> None:  # type: ignore[no-untyped-def]
    """The tab's own handler for a picked run (its outputs in order: reward chart, the run's
    overview kept for the charts, trainer note, steps table, then the metrics charts: coverage,
    wasted share, overlap, the trainer's chart), with the real overview and step reports."""
    from types import SimpleNamespace

    from app.schemas.runs import RunMetricsResponse, RunOverviewResponse
    from app.ui.tabs.runs.tab import _Handlers
    from gmts_core.runs import open_run
    from gmts_core.runs.analysis import logged_step_report

    reports = [logged_step_report(s).to_dict() for s in open_run(DATA / "logged").iter_steps()]

    class Backend:
        def run_overview(self, run_id: str) -> RunOverviewResponse:
            return services.runs.overview(run_id)  # type: ignore[no-any-return]

        def run_metrics(self, run_id: str, params: dict) -> RunMetricsResponse:
            body = {"reports": reports, "running": False, "steps_done": 2, "steps_total": 2}
            return RunMetricsResponse.model_validate({"run": run_id, **body})

    out = _Handlers(SimpleNamespace(backend=Backend())).load_run("trl", "tiny-arith", 0.2)  # type: ignore[arg-type]
    note, fig = out[2], out[7]
    history = json.loads((DATA / "trl" / "trainer_state.json").read_text())["log_history"]
    entropy = traces(fig)["entropy (TRL log: entropy)"]
    assert list(entropy.y) == [h["entropy"] for h in history if "entropy" in h]
    gmts = traces(fig)["entropy mean (GMTS trainer log)"]  # what GMTS computed, beside it
    assert list(gmts.y) == [r["entropy_mean"] for r in reports] and gmts.yaxis == "y2"
    assert "What TRL itself logged" in note
    # a later poll redraws it from the overview kept in the tab's state
    again = _Handlers(SimpleNamespace(backend=Backend())).poll("trl", "tiny-arith", 0.2, out[1])
    assert traces(again[3])["entropy (TRL log: entropy)"].y == entropy.y


def test_the_entropy_gmts_recomputes_is_charted_beside_the_logged_one(services) -> None:  # type: ignore[no-untyped-def]
    """An analysed step's report carries the mean token entropy the model gives the answers:
    charted next to TRL's logged entropy (the same model, the same answers: close)."""
    from app.services.runs import StepOptions

    view = services.runs.step_view("trl", 1, StepOptions(model="tiny-arith")).model_dump()
    overview = services.runs.overview("trl").model_dump()
    fig = trainer_metrics_figure(overview, [view["report"]])
    assert fig is not None
    gmts = traces(fig)["entropy mean (GMTS, recomputed with the model)"]
    logged = traces(fig)["entropy (TRL log: entropy)"]
    assert list(gmts.x) == [1] and gmts.y[0] == pytest.approx(logged.y[0], rel=0.2)


def test_a_trainer_log_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(DATA / "verl", tmp_path / "verl")
    own = build_services(make_settings(tmp_path, run_roots=[tmp_path], default_model="tiny-arith"))
    reads = []
    read = own.runs.readers.trainer_metrics
    own.runs.readers.trainer_metrics = lambda *a: reads.append(a) or read(*a)  # type: ignore[method-assign]
    first = own.runs.overview("verl").model_dump()["trainer_metrics"]
    assert own.runs.overview("verl").model_dump()["trainer_metrics"] == first
    assert len(reads) == 1
    log = tmp_path / "verl" / "gmts-fixture" / "tiny-arith-grpo.jsonl"
    with log.open("a") as f:  # the trainer logs a step more
        f.write(json.dumps({"step": 4, "data": {"actor/entropy": 0.25}}) + "\n")
    again = own.runs.overview("verl").model_dump()["trainer_metrics"]
    assert len(reads) == 2 and again["steps"][-1] == 4 and again["series"]["entropy"][-1] == 0.25
