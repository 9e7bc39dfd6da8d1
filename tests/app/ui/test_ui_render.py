"""The UI's pure presentation functions: token renderer, charts, Learn tab (no Gradio)."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from app.services.responses import analysis_json
from app.ui import charts, render
from app.ui.tabs.learn import learn
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, RewardSpec, analyze
from gmts_core.model.loading import load_model
from tests.app.api_helpers import TINY

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
METHODS = ("entropy", "gmts")


@pytest.fixture(scope="module")
def tiny_lm(model_root: Path):
    return load_model(model_root / TINY, name="tiny")


@pytest.fixture(scope="module")
def result(tiny_lm) -> dict:
    group = GroupInput(
        f"Q: 47+38=?\nA: {EVIL}",
        answers=[" 7+8=15 carry 1,\n answer 85", f" answer 84 {EVIL}", "  85\t!"],
        reward=RewardSpec("numeric", "85"),
    )
    return analysis_json(analyze(tiny_lm, [group], AnalysisConfig(ratio=0.3)))


@pytest.fixture(scope="module")
def batch_result(tiny_lm) -> dict:
    groups = [
        GroupInput("Q: 1+1=?\nA:", answers=[" 2", " 3 or 4"], rewards=[1.0, 0.0]),
        GroupInput("Q: 2+2=?\nA:", answers=[" 4 is it", " 4"], rewards=[1.0, 1.0]),
    ]
    return analysis_json(analyze(tiny_lm, groups, AnalysisConfig(ratio=0.25)))


class _Collector(HTMLParser):
    """Collects tags, attributes and text of an HTML string, to inspect the real parse."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> _Collector:
    c = _Collector()
    c.feed(html)
    return c


def token_spans(html: str) -> list[dict[str, str | None]]:
    return [
        a for t, a in parse(html).tags if t == "span" and "tok" in (a.get("class") or "").split()
    ]


def test_one_span_per_answer_token(result: dict) -> None:
    html = render.render_result(result, METHODS, "entropy")
    n_tokens = sum(len(a["tokens"]) for a in result["answers"])
    assert len(token_spans(html)) == n_tokens == result["summary"]["num_tokens"]


@pytest.mark.parametrize("color_by", list(render.COLOR_BY))
def test_selected_counts_equal_k_per_method(result: dict, color_by: str) -> None:
    html = render.render_result(result, METHODS, color_by)
    spans = token_spans(html)
    k = result["summary"]["k"]
    for cls in ("sel-a", "sel-b"):
        assert sum(cls in (s["class"] or "").split() for s in spans) == k
    both = sum("mark-both" in (s["class"] or "") for s in spans)
    assert both == result["summary"]["overlap"]["entropy|gmts"]["count"]


def test_marks_follow_each_tokens_flags(result: dict) -> None:
    spans = token_spans(render.render_result(result, ("gmts", "surprisal"), "gmts_rank"))
    tokens = [t for a in result["answers"] for t in a["tokens"]]
    for span, tok in zip(spans, tokens, strict=True):
        classes = (span["class"] or "").split()
        assert ("sel-a" in classes) == tok["selected"]["gmts"]
        assert ("sel-b" in classes) == tok["selected"]["surprisal"]
        assert span["data-pos"] == str(tok["position"])
        assert span["data-id"] == str(tok["id"])
        assert span["data-rank-a"] == str(tok["ranks"]["gmts"])


def test_prompt_answers_and_alternatives_are_escaped(result: dict) -> None:
    evil_result = copy.deepcopy(result)
    tok = evil_result["answers"][0]["tokens"][0]
    tok["alternatives"][0]["text"] = EVIL
    tok["text"] = '"><img src=x onerror=alert(1)>'
    html = render.render_result(evil_result, METHODS, "entropy")
    parsed = parse(html)
    tags = {t for t, _ in parsed.tags}
    assert "script" not in tags and "img" not in tags
    assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs)
    text = "".join(parsed.text)
    assert "<script>" in text  # shown as text, in the prompt and in the answer
    # the tooltip carries the alternative as data, intact after unescaping
    tips = [a["data-tip"] or "" for a in token_spans(html)]
    assert any("<script>" in t for t in tips)


def test_detail_json_survives_quotes_and_markup(result: dict) -> None:
    """The panel's compact JSON sits in a single-quoted attribute: quotes of either kind and
    markup in a token or an alternative come back intact, and nothing breaks out of it."""
    import json

    evil = copy.deepcopy(result)
    tok = evil["answers"][0]["tokens"][0]
    tok["text"] = 'it\'s "q" & <b>'
    tok["alternatives"][0]["text"] = "'><img src=x onerror=alert(1)>" + EVIL
    html = render.render_result(evil, METHODS)
    tags = {t for t, _ in parse(html).tags}
    assert "script" not in tags and "img" not in tags
    span = token_spans(html)[0]
    detail = json.loads(span["data-detail"] or "")
    assert detail["text"] == tok["text"]
    assert detail["alternatives"][0][0] == tok["alternatives"][0]["text"]
    assert detail["prob"] == pytest.approx(tok["prob"], rel=1e-3)  # 4 significant digits
    assert repr(tok["text"]) in (span["data-tip"] or "")


def test_learn_and_headers_escape_text(result: dict) -> None:
    evil = copy.deepcopy(result)
    evil["answers"][1]["reward_detail"]["extracted"] = EVIL
    evil["answers"][0]["tokens"][0]["text"] = EVIL
    for html in (render.render_result(evil, METHODS), learn.learn_html(evil, METHODS)):
        tags = {t for t, _ in parse(html).tags}
        assert "script" not in tags and "img" not in tags


def test_whitespace_is_visible_and_wraps() -> None:
    html = render.visible_text(" a\nb\t")
    assert html.count(render.SPACE_GLYPH) == 1 and "⏎" in html and "<br>" in html and "→" in html
    assert render.SPACE_GLYPH == "\u2423" and "·" not in html  # a middle dot read as a minus
    assert "<wbr>" in html
    assert "∅" in render.visible_text("")


def test_zero_signal_banner_only_when_all_rewards_equal(tiny_lm, result: dict) -> None:
    assert "zero-signal" not in render.render_result(result, METHODS)
    flat = analysis_json(
        analyze(
            tiny_lm,
            [GroupInput("Q: 1+1=?\nA:", answers=[" 2", " 2."], rewards=[1.0, 1.0])],
            AnalysisConfig(),
        )
    )
    html = render.render_result(flat, METHODS)
    assert 'class="zero-signal"' in html and "No learning signal" in html


def test_legend_names_methods_and_scale(result: dict) -> None:
    html = render.render_result(result, ("surprisal", "gmts"), "grad_proxy")
    assert "only surprisal" in html and "only gmts" in html and "both" in html
    assert "gradient proxy" in html
    lo, hi = render.score_range([t for a in result["answers"] for t in a["tokens"]], "grad_proxy")
    assert lo < hi
    assert render.fmt(hi) in html


def test_shade_follows_direction() -> None:
    assert render.shade_level(2.0, 0.0, 2.0, True) == 1.0
    assert render.shade_level(2.0, 0.0, 2.0, False) == 0.0
    assert render.shade_level(None, 0.0, 2.0, True) == 0.0
    assert render.shade_level(1.0, 1.0, 1.0, True) == 0.0


def test_answer_header_shows_numbers(result: dict) -> None:
    html = render.render_result(result, METHODS)
    for ans in result["answers"]:
        assert f"#{ans['index']}" in html
        assert f"length {ans['length']}" in html
    assert "numeric: extracted" in html


def test_batch_form_renders_the_chosen_group(batch_result: dict) -> None:
    for gi, group in enumerate(batch_result["groups"]):
        html = render.render_result(batch_result, METHODS, group_index=gi)
        assert len(token_spans(html)) == group["summary"]["num_tokens"]
        assert (
            sum("sel-b" in (s["class"] or "") for s in token_spans(html))
            == group["summary"]["selected_count"]["gmts"]
        )
    assert "zero-signal" in render.render_result(batch_result, METHODS, group_index=1)


def test_unknown_colour_by_is_an_error(result: dict) -> None:
    with pytest.raises(ValueError, match="valid: entropy"):
        render.render_result(result, METHODS, "nope")


def test_scatter_has_a_point_per_token_and_marks_selection(result: dict) -> None:
    figs = charts.group_figures(result, METHODS)
    scatter = figs["scatter"]
    per_answer = [t for t in scatter.data if t.name.startswith("answer")]
    assert sum(len(t.x) for t in per_answer) == result["summary"]["num_tokens"]
    marked = {t.name: len(t.x) for t in scatter.data if t.name.startswith("selected")}
    assert marked == {
        "selected by entropy": result["summary"]["k"],
        "selected by gmts": result["summary"]["k"],
    }
    assert len(figs["advantages"].data[0].y) == len(result["answers"])
    assert len(figs["positions"].data) == len(result["answers"])


def test_summary_rows_quote_the_summary(result: dict) -> None:
    rows = dict(charts.summary_rows(result["summary"], METHODS))
    cov = result["summary"]["gradient_coverage"]["gmts"]
    assert rows["gmts: gradient coverage"] == f"{100 * cov:.1f}%"
    assert "overlap entropy ∩ gmts" in rows
    assert re.match(r"-?\d\.\d{3}|—", rows["Spearman(H, grad_proxy) whole group"])


def test_learn_quotes_live_advantages(result: dict) -> None:
    html = learn.learn_html(result, METHODS)
    adv = result["answers"][1]["advantage"]
    assert render.fmt(adv, 3) in html and "scaled by" in html
    assert "Gini impurity" in html
    assert "Analyze a group" in learn.learn_html(None, METHODS)


def test_learn_lists_the_literature_family_with_live_coverage(result: dict) -> None:
    html = learn.learn_html(result, METHODS)
    for name, arxiv in (("clip_cov", "2505.22617"), ("gtpo", "2508.04349"), ("rsi", "2606.31575")):
        assert f"<code>{name}</code>" in html and arxiv in html
    cov = result["summary"]["gradient_coverage"]["gmts"]
    assert (
        '<td data-label="method"><code>gmts</code></td>' in html
        and f"{render.fmt(100 * cov, 3)}%" in html
    )


def test_chart_coordinates_are_rounded_to_four_digits(result: dict) -> None:
    """The Explore charts carry 4 significant digits (what travels with every page), not
    other numbers: each point still sits on its token's value."""
    scatter = charts.group_figures(result, METHODS)["scatter"]
    toks = result["answers"][0]["tokens"]
    xs, ys = list(scatter.data[0].x), list(scatter.data[0].y)
    assert xs == pytest.approx([t["entropy"] for t in toks], rel=1e-3)
    assert ys == pytest.approx([t["grad_proxy"] for t in toks], rel=1e-3, abs=1e-12)
    assert all(float(f"{v:.4g}") == v for v in xs + ys)
