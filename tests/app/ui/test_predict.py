"""Predict, then reveal: the bar above Explore's token view (its behaviour in the page is
tested in a real Chromium: tests/browser/test_first_screen.py)."""

from __future__ import annotations

from app.ui.predict import predict_bar, with_predict_bar
from app.ui.tabs.explore import example
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
