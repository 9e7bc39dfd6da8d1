"""The Runs tab opens a miles run (its Parquet mirror): listed, summarised, a step analysed on
its exact token ids with the prompts decoded by the model's tokenizer, and rendered."""

from __future__ import annotations

import pandas as pd

from app.services.runs import StepOptions
from app.ui.tabs.runs.view import run_choices, step_html, step_summary, steps_table
from tests.app.ui.tabs.runs.conftest import DATA


def test_a_miles_run_is_listed_summarised_and_its_step_shown(services) -> None:  # type: ignore[no-untyped-def]
    choices = dict((v, k) for k, v in run_choices(services.runs.list_runs()))
    assert choices["miles"] == "miles (miles, 3 steps)"
    overview = services.runs.overview("miles").model_dump()
    assert list(steps_table(overview)["step"]) == [0, 1, 2]
    assert [o["num_answers"] for o in overview["overview"]] == [12, 12, 12]
    view = services.runs.step_view(
        "miles", 0, StepOptions(model="tiny-arith", methods=("entropy", "gmts"))
    ).model_dump()
    assert view["mode"] == "analysis" and view["format"] == "miles"
    groups = view["analysis"]["groups"]
    df = pd.read_parquet(DATA / "miles" / "dashboard_columns" / "rollout_0.parquet")
    assert sum(len(g["answers"]) for g in groups) == len(df)
    # the prompt text is the mirror's prompt ids decoded: the TRL run's prompts
    trl = pd.read_parquet(DATA / "trl" / "completions" / "completions_00001.parquet")
    assert [g["prompt"] for g in groups] == list(dict.fromkeys(trl["prompt"]))
    html = step_html(view)
    assert html.count(" data-pos=") == int(df["response_length"].sum())
    assert "Step 0" in step_summary(view)
