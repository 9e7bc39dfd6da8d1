"""Predict, then reveal: the bar above Explore's and Learn's token views (its behaviour in the
page is tested in a real Chromium: tests/browser/test_first_screen.py, on the real model in
tests/browser/test_real_model.py)."""

from __future__ import annotations

from app.ui.predict import predict_bar, with_predict_bar
from app.ui.render import render_result
from app.ui.tabs.explore import example, view
from app.ui.tabs.explore import tab as explore_tab


def test_the_bar_names_both_methods_escaped_and_asks_for_b_first() -> None:
    bar = predict_bar(("entropy", "<b>gmts</b>"))
    assert '<option value="b">&lt;b&gt;gmts&lt;/b&gt;</option><option value="a">entropy' in bar
    assert 'class="predict-toggle"' in bar and 'class="predict-reveal" disabled' in bar
    assert 'tabindex="0"' not in bar  # the token area stays the one Tab stop
    wrapped = with_predict_bar("<div class='gmts-view'></div>", ("entropy", "gmts"))
    assert wrapped.startswith('<div class="predict-scope"><div class="predict-bar">')


def test_explore_opens_with_the_bar_above_the_example_tokens() -> None:
    tokens = explore_tab.initial_values(example.load_example())[1]
    assert tokens.startswith('<div class="predict-scope"><div class="predict-bar">')
    assert tokens.count('class="predict-bar"') == 1 and "sel-b" in tokens


def test_learn_opens_its_group_hiding_the_picks_with_explores_token_view() -> None:
    result = example.load_example()
    methods = ("entropy", "gmts")
    html = view.learn_view(result, *methods, group_index=1)
    start = html.index('<div class="predict-scope predicting">')
    scope = html[start:]
    # the same bar and token view as Explore's (one renderer), for the group Learn explains
    assert scope.startswith(
        '<div class="predict-scope predicting">'
        + predict_bar(methods, predicting=True)
        + render_result(result, methods, "entropy", 1)
    )
    assert 'class="predict-toggle" checked' in scope and 'class="predict-reveal">' in scope
    # the reasons, kept in the scope (shown on reveal), under their own id
    assert '<div class="predict-reasons"><section class="why-differ" id="learn-why-differ"' in scope
    assert html.count('class="predict-scope') == 1
