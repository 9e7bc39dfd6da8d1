"""The Explore tab opens on the default example (app.services.default_example): a batch in which
entropy and GMTS disagree, shown with its batch view and "why they differ" (the stored body
matching a fresh analysis is tested in tests/app/services/test_default_example.py)."""

from __future__ import annotations

import re
from pathlib import Path

from app.ui.tabs.explore import example
from app.ui.tabs.explore import tab as explore_tab


def test_a_missing_or_broken_example_means_an_empty_first_screen(tmp_path: Path) -> None:
    assert example.load_example(tmp_path / "absent.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert example.load_example(bad) is None


def test_first_view_shows_the_disagreement() -> None:
    shipped = example.load_example()
    assert shipped is not None
    values = explore_tab.initial_values(shipped)
    note, tokens, why, spot = values[0], values[1], values[11], values[12]
    assert "Why they differ" in note
    assert "entropy spends" in spot and "% of its picks here" in spot
    assert "Why they differ: entropy vs gmts" in why and 'data-reason="zero_advantage"' in why
    only = re.findall(r'class="tok[^"]*\bmark-[ab]\b', tokens)
    assert only, "the first group shows tokens selected by one method only"
    assert tokens.count('tabindex="0"') == 1  # the token area is one Tab stop
    assert values[10].visible  # the batch view (groups, budget chart) is open


def test_first_screen_payload_stays_compact() -> None:
    """The example's token view and charts travel in the page's Gradio config and the browser
    parses all of them before the first highlighted token shows: keep their bytes per token in
    check (the full tooltips, detail JSON and 17-digit floats were ~1.2 kB and ~400 B a token)."""
    shipped = example.load_example()
    assert shipped is not None
    n = sum(len(a["tokens"]) for a in shipped["groups"][0]["answers"])
    values = explore_tab.initial_values(shipped)
    assert len(re.findall(r'class="tok[ "]', values[1])) == n
    assert len(values[1].encode()) / n < 800
    figures = values[3:7]  # scatter, distributions, positions, advantages
    assert all(hasattr(f, "to_json") for f in figures)
    # a fixed layout per chart plus ~350 B a token (the 214-token example of before had 75 kB)
    assert sum(len(f.to_json()) for f in figures) < 16_000 + 350 * n


def test_exported_report_carries_summary_why_and_charts() -> None:
    """The HTML export of the default example's view is a report: summary, why they differ, the
    budget chart and the group's four charts, plotly inlined (no script or style from elsewhere)."""
    from app.ui.tabs.explore.view_export import view_html

    shipped = example.load_example()
    assert shipped is not None
    page = view_html(shipped, ("entropy", "gmts"), "entropy", 0)
    assert 'class="summary-box"' in page and "wasted share" in page
    assert 'id="why-differ"' in page and 'data-reason="zero_advantage"' in page
    assert page.count('class="plotly-graph-div"') == 5
    assert not re.search(r"<(script|link)[^>]+(src|href)=['\"]?https?:", page)


def test_the_real_model_example_is_a_valid_request_for_the_real_model() -> None:
    from app.schemas.analyze_request import AnalyzeRequest
    from app.ui.tabs.explore.controls import FORM_FIELDS
    from app.ui.tabs.explore.view import build_request
    from gmts_core.methods.rewards import get_reward

    assert set(example.REAL_MODEL_FIELDS) <= set(FORM_FIELDS)
    values = dict(zip(example.REAL_MODEL_FIELDS, example.real_model_values(), strict=True))
    assert values["model"] == "smollm2-135m" and values["answers_text"] == ""
    body = build_request(example.REAL_MODEL_EXAMPLE, ["entropy", "gmts"])
    req = AnalyzeRequest.model_validate(body)
    assert req.model == "smollm2-135m" and req.chat_template is None  # the model's default: on
    assert req.num_samples == 8 and req.max_new_tokens == 96
    assert get_reward("final_number")("Tom has 85 apples.", "85").reward == 1.0
    assert example.REAL_MODEL_BUTTON.startswith("Same view on a real model: smollm2-135m")


def test_a_why_token_of_another_group_moves_every_view_to_that_group() -> None:
    """What the page asks when a "why they differ" token of a group not on screen is clicked
    (static/gmts.js writes "<group> <click count>" into #goto-group)."""
    shipped = example.load_example()
    last = len(shipped["groups"]) - 1
    for asked, g in (("2 1", 2), ("2 7", 2), (f"{last + 5} 3", last), ("", 0), ("x", 0)):
        drill, *values = explore_tab.go_to_group(asked, shipped, "entropy", "gmts", "entropy")
        assert drill.value == g
        drilled = explore_tab.views(shipped, "entropy", "gmts", "entropy", g)
        for i in (0, 1, 2, 7, 8, 11, 12):  # the text views, as when g is picked in the drill-down
            assert values[i] == drilled[i], i
        assert f'<div class="gmts-view" data-group="{g}"' in values[1]
        assert f'<div class="gmts-view" data-group="{g}"' in values[7]  # Learn follows
