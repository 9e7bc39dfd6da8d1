"""One colour per method on every chart and in the token marks (app.palette)."""

from __future__ import annotations

import re

import pytest

from app import palette
from app.reports.run_charts import per_method_figure
from app.ui import charts, render
from app.ui.tabs.explore import batch
from app.ui.tabs.train import charts as train_charts


def test_known_methods_have_distinct_okabe_ito_colours() -> None:
    colours = [palette.method_color(m) for m in palette.METHOD_COLORS]
    assert len(set(colours)) == len(colours)
    assert palette.method_color("entropy") == "#E69F00"
    assert palette.method_color("gmts") == "#0072B2"


def test_a_new_method_gets_a_stable_colour_from_the_fallback_set() -> None:
    c = palette.method_color("my_new_method")
    assert c in palette.FALLBACK_COLORS and c not in palette.METHOD_COLORS.values()
    assert palette.method_color("my_new_method") == c  # deterministic (a hash, not a counter)
    picks = {palette.method_color(f"method_{i}") for i in range(40)}
    assert len(picks) > 3  # spread over the set, not one colour for every new method


def test_rgba_and_css_vars() -> None:
    assert palette.rgba("#0072B2", 0.5) == "rgba(0,114,178,0.5)"
    assert palette.css_vars("gmts", "entropy") == "--gmts-a:#0072B2;--gmts-b:#E69F00"


@pytest.mark.parametrize("methods", [("entropy", "gmts"), ("gmts", "surprisal")])
def test_charts_and_marks_use_each_methods_colour(result: dict, methods: tuple[str, str]) -> None:
    figs = charts.group_figures(result, methods)
    for m in methods:
        ring = next(t for t in figs["scatter"].data if t.name == f"selected by {m}")
        assert ring.marker.color == palette.method_color(m)
        hist = [t for t in figs["distributions"].data if t.name == f"selected by {m}"]
        assert hist and all(t.marker.color == palette.method_color(m) for t in hist)
    assert figs["distributions"].layout.barmode == "group"  # side by side, never blended
    budget = batch.budget_chart(result, methods)
    assert {t.name: t.marker.color for t in budget.data} == {
        m: palette.method_color(m) for m in methods
    }
    html = render.render_result(result, methods)
    style = re.search(r'class="gmts-view"[^>]*style="([^"]*)"', html)
    assert style and style.group(1) == palette.css_vars(*methods)


def test_scatter_offers_a_log_axis(result: dict) -> None:
    scatter = charts.group_figures(result, ("entropy", "gmts"))["scatter"]
    labels = [b.label for menu in scatter.layout.updatemenus for b in menu.buttons]
    assert labels == ["linear", "log"]


def test_train_curves_use_the_method_colour_and_whole_steps() -> None:
    history = [
        {"step": s, "method": "entropy", "reward_mean": 0.5, "reward_std": 0.1, "loss": 0.1,
         "policy_loss": 0.1, "kl": 0.0, "wasted_share": {"entropy": 0.2, "gmts": 0.0}}
        for s in (1, 2, 3)
    ]  # fmt: skip
    fig = train_charts.reward_figure(history, [{"step": 0, "accuracy": 0.4}])
    # accuracy points and raw rewards are markers, the moving average a line: one colour; the
    # starting accuracy is a grey dashed line, no method's
    start = [t for t in fig.data if (t.name or "").startswith("start: held-out accuracy")]
    assert len(start) == 1 and start[0].line.dash == "dash"
    curves = [t for t in fig.data if t not in start]
    assert {t.line.color or t.marker.color for t in curves} == {palette.method_color("entropy")}
    assert start[0].line.color not in palette.OKABE_ITO
    assert [t.mode for t in curves] == ["markers", "lines", "markers"]
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.tickformat == "d"
    wasted = train_charts.wasted_figure(history)
    assert {t.name: t.line.color for t in wasted.data} == {
        "entropy": palette.method_color("entropy"), "gmts": palette.method_color("gmts")
    }  # fmt: skip
    loss = train_charts.loss_figure(history)  # β = 0: loss equals the policy loss, drawn once
    assert [t.name for t in loss.data] == ["loss (= policy loss, β = 0)", "KL to start (k3)"]


def test_rank_line_reads_as_a_rank_not_a_verdict(result: dict) -> None:
    group = result["groups"][0]
    tok = group["answers"][0]["tokens"][0]
    html = render.render_result(result, ("entropy", "gmts"))
    n, kept = result["summary"]["num_tokens"], result["summary"]["selected_count"]
    tip = render.tooltip_text(tok, 0, ("entropy", "gmts"), render.rank_pool(result, group))
    assert f"rank of {n} tokens in the batch:" in tip
    verdict = "selected" if tok["selected"]["gmts"] else "not selected"
    assert f"gmts: #{tok['ranks']['gmts']} — {verdict} (it keeps the top {kept['gmts']})" in tip
    assert "(✓ selected)" not in tip
    assert 'tabindex="0"' in html  # tokens are reachable by keyboard


def test_zero_signal_group_has_no_marks_and_a_hatched_band(result: dict) -> None:
    html = render.render_result(result, ("entropy", "gmts"), group_index=1)
    marked = re.compile(r'class="tok [^"]*mark-')
    assert "no-gradient" in html and "no gradient here" in html
    assert "ranks: none that matter" in html
    # entropy spends budget here (batch scope); each such mark is flagged as wasted, and gmts,
    # whose scores are all 0 here, selects nothing
    classes = re.findall(r'class="(tok[ "][^"]*)"', html)
    assert not any("sel-b" in c for c in classes)
    wasted = [c for c in classes if "mark-" in c]
    assert wasted and all("tok-wasted" in c for c in wasted)
    live = render.render_result(result, ("entropy", "gmts"), group_index=0)
    assert "no-gradient" not in live and marked.search(live)


def test_sixteen_answers_are_told_apart_in_the_charts() -> None:
    """Colours repeat after nine answers; the symbol (scatter) and dash (curves) then differ."""
    answers = [
        {"index": i, "advantage": 0.0,
         "tokens": [{"position": 0, "entropy": 0.1 * i, "grad_proxy": 0.01, "text": "x"}]}
        for i in range(16)
    ]  # fmt: skip
    group = {"answers": answers}
    scatter = charts.scatter_entropy_proxy(group, ("entropy", "gmts"))
    looks = [(t.marker.color, t.marker.symbol) for t in scatter.data if t.name.startswith("answer")]
    assert len(looks) == 16 and len(set(looks)) == 16
    curves = charts.position_curves(group)
    lines = [(t.line.color, t.line.dash) for t in curves.data]
    assert len(lines) == 16 and len(set(lines)) == 16


def test_run_reports_use_the_method_colours() -> None:
    """The Runs tab's and `gmts analyze-run`'s charts colour a method as every tab does."""
    rows = [{"step": s, "gradient_coverage": {"applied": 0.9, "entropy": 0.8, "gmts": 0.95}}
            for s in (1, 2)]  # fmt: skip
    fig = per_method_figure(rows, "gradient_coverage", "coverage")
    assert {t.name: t.line.color for t in fig.data} == {
        m: palette.method_color(m) for m in ("applied", "entropy", "gmts")
    }
