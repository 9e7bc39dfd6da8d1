"""The Runs tab's Gradio-free functions: the steps table, charts and the step view HTML."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from app.schemas.runs import RunsResponse
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
from tests.app.ui.tabs.runs.conftest import DATA


def test_run_choices_and_steps_table(services) -> None:  # type: ignore[no-untyped-def]
    choices = dict((v, k) for k, v in run_choices(services.runs.list_runs()))
    assert choices["verl"] == "verl (verl, 3 steps)"
    overview = services.runs.overview("logged").model_dump()
    table = steps_table(overview)
    assert list(table["step"]) == [1, 2]
    assert "coverage applied" in table.columns
    reward, cover = overview_figures(overview)
    assert [t.name for t in cover.data] == ["applied", "entropy", "gmts"]


def test_logged_step_html_marks_the_applied_mask(services) -> None:  # type: ignore[no-untyped-def]
    view = services.runs.step_view("logged", 2, StepOptions()).model_dump()
    html = step_html(view)
    df = pd.read_parquet(DATA / "logged" / "gmts_selection" / "selection_00002.parquet")
    assert html.count(" data-pos=") == len(df)
    assert html.count("sel-a") >= int(df["selected"].sum())  # applied marks (+ legend)
    assert "trainer applied" in step_summary(view)
    from app.ui.tabs.runs.view import step_differences

    panel = step_differences(view)  # the one renderer, Explore's, under the Runs tab's own id
    assert panel.startswith('<section class="why-differ" id="run-why-differ"')
    assert "Why they differ: applied vs gmts" in panel
    assert "Pick a run" in step_html(None)


def test_a_one_prompt_step_renders_its_tokens_and_why_they_differ(
    services,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """A TRL run with one prompt per step is analysed in single form (answers at top level):
    the step view used to render nothing for it."""
    from app.ui.tabs.runs.view import step_differences

    folder = tmp_path / "one" / "completions"
    folder.mkdir(parents=True)
    df = pd.read_parquet(DATA / "trl" / "completions" / "completions_00002.parquet")
    one = df[df["prompt"] == df["prompt"].iloc[0]]
    one.to_parquet(folder / "completions_00001.parquet")
    settings = make_settings(tmp_path, run_roots=[tmp_path], default_model="tiny-arith")
    own = build_services(settings)
    view = own.runs.step_view(
        "one", 1, StepOptions(model="tiny-arith", methods=("entropy", "gmts"))
    ).model_dump()
    assert view["analysis"]["groups"] is None  # the single form
    html = step_html(view)
    assert html.count('class="gmts-view"') == 1 and html.count(" data-pos=") > 0
    assert html.count('class="answer"') == len(one)
    panel = step_differences(view)
    assert panel.startswith('<section class="why-differ" id="run-why-differ"')
    assert "Why they differ: entropy vs gmts" in panel
    diff = view["analysis"]["differences"][0]
    assert f"Only entropy: <b>{diff['only_a']}</b>" in panel
    assert panel.count('class="why-row"') == sum(1 for r in diff["reasons"] if r["count"])


def test_metrics_figures_and_unreadable_runs(services, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from app.ui.tabs.runs.view import metrics_figures, metrics_status, unreadable_note

    params = StepOptions(model="tiny-arith", methods=("entropy", "gmts"))
    services.run_metrics.get("verl", params)
    assert services.run_metrics.wait(300)
    metrics = services.run_metrics.get("verl", params).model_dump()
    cover, waste, overlap = metrics_figures(metrics)
    assert [t.name for t in cover.data] == ["entropy", "gmts"] == [t.name for t in waste.data]
    assert [t.name for t in overlap.data] == ["entropy & gmts"]
    assert list(cover.data[0].x) == [1, 2, 3]
    assert metrics_status(metrics) == "Metrics over steps: 3 of 3 steps analysed."
    rows = [
        {"id": "ok", "format": "verl", "num_steps": 2},
        {"id": "bad\\xff.jsonl", "readable": False, "reason": "not valid UTF-8", "format": None},
    ]
    runs = RunsResponse.model_validate(
        {
            "runs": [
                {"logged": False, "num_steps": None, "first_step": None, "last_step": None, **r}
                for r in rows
            ],
            "formats": ["verl"],
        },
    )
    assert run_choices(runs) == [("ok (verl, 2 steps)", "ok")]
    assert "` bad\\xff.jsonl `: not valid UTF\\-8" in unreadable_note(runs)  # escaped once


def _rank_labels(html: str) -> list[tuple[str, list[int]]]:
    """Every token tooltip's rank label and its ranks."""
    import html as html_lib
    import re

    found = []
    for tip in re.findall(r' data-tip="([^"]*)"', html):
        lines = html_lib.unescape(tip).split("\n")
        label = next((line for line in lines if line.startswith("rank ")), None)
        if label is None:
            continue
        ranks = [int(r) for r in re.findall(r"^  \S+: #(\d+)", "\n".join(lines), re.M)]
        found.append((label, ranks))
    return found


def assert_ranks_fit_their_labels(html: str, scope: str) -> None:
    """A rank never exceeds the token count its label names, and only answer scope says
    "within answer" (the TRL run's tooltip said "within answer #1 of 19 tokens: entropy #22")."""
    import re

    labels = _rank_labels(html)
    assert labels
    for label, ranks in labels:
        if scope != "answer":
            assert "within answer" not in label, label
        m = re.search(r"of (\d+) tokens", label)
        assert m is not None, label
        assert all(1 <= r <= int(m.group(1)) for r in ranks), (label, ranks)


@pytest.mark.parametrize("scope", ["batch", "group", "answer"])
def test_step_view_tooltip_ranks_fit_their_labels(services, scope: str) -> None:  # type: ignore[no-untyped-def]
    view = services.runs.step_view(
        "trl", 2, StepOptions(model="tiny-arith", methods=("entropy", "gmts"), scope=scope)
    ).model_dump()
    assert view["analysis"]["settings"]["scope"] == scope
    assert_ranks_fit_their_labels(step_html(view), scope)


def test_spotlight_tooltip_ranks_fit_their_labels() -> None:
    from app.services.default_example import load_default_example
    from app.ui.tabs.explore.spotlight import spotlight_html

    result = load_default_example()
    assert result is not None
    html = spotlight_html(result, ("entropy", "gmts"))
    assert 'class="spot-' in html
    # the default example is analysed with batch scope: ranks count over the whole batch
    assert_ranks_fit_their_labels(html, "batch")


def test_the_report_page_holds_the_run_the_step_and_its_tokens_offline(services) -> None:  # type: ignore[no-untyped-def]
    """The Runs tab's download: the run and the step in words, why they differ, the step's
    tokens (as the tab renders them), the charts, and nothing loaded from elsewhere."""
    import re

    from app.ui.tabs.runs.view import report_page, step_differences

    first = services.runs.overview("trl").model_dump()["steps"][0]
    view = services.runs.step_view("trl", first, StepOptions()).model_dump()
    overview = services.runs.overview("trl").model_dump()  # with the step's report now
    page = report_page("trl", overview, view)
    assert "Run <code>trl</code>:" in page and f"steps summarised ({first}" in page
    assert f"<b>Step {view['step']}</b>" in page  # the step summary, its Markdown as HTML
    assert step_html(view) in page and step_differences(view) in page
    assert "What TRL itself logged" in page  # the trainer's own metrics, named
    assert overview["reports"]  # the analysed step's report: the coverage chart
    assert page.count("<div class='chart'>") == 3  # reward, the trainer's chart, coverage
    assert page.count("plotly.js v") == 1  # plotly.js inlined once
    markup = re.sub(r"<script>.*?</script>", "", page, flags=re.S)  # the inlined scripts' text
    assert "<script src" not in page and not re.search(r"(src|href)=.?https?:", markup)
