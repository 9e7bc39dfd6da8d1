"""The Runs tab's Gradio-free functions: the steps table, charts and the step view HTML."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from app.services.container import build_services
from app.services.runs import StepOptions
from app.ui.tabs.runs.view import (
    overview_figures,
    run_choices,
    step_html,
    step_summary,
    steps_table,
)
from tests.app.api_helpers import make_settings

DATA = Path(__file__).resolve().parents[4] / "data" / "runs"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    settings = make_settings(
        tmp_path_factory.mktemp("m"), run_roots=[DATA], default_model="tiny-arith"
    )
    return build_services(settings)


def test_run_choices_and_steps_table(services) -> None:  # type: ignore[no-untyped-def]
    choices = dict((v, k) for k, v in run_choices(services.runs.list_runs().model_dump()))
    assert choices["verl"] == "verl (verl, 3 steps)"
    overview = services.runs.overview("logged").model_dump()
    table = steps_table(overview)
    assert list(table["step"]) == [1, 2]
    assert "coverage applied" in table.columns
    reward, cover = overview_figures(overview)
    assert [t.name for t in cover.data] == ["applied", "entropy", "gmts"]


def test_logged_step_html_marks_the_applied_mask(services) -> None:  # type: ignore[no-untyped-def]
    view = services.runs.step_view_blocking("logged", 2, StepOptions()).model_dump()
    html = step_html(view)
    df = pd.read_parquet(DATA / "logged" / "gmts_selection" / "selection_00002.parquet")
    assert html.count(" data-pos=") == len(df)
    assert html.count("sel-a") >= int(df["selected"].sum())  # applied marks (+ legend)
    assert "trainer applied" in step_summary(view)
    assert "Pick a run" in step_html(None)
