"""Predict, then reveal, driven in a real Chromium on any token view that carries the bar
(app/ui/predict.py, static/gmts.js): Explore's and Learn's, on the demo model
(tests/browser/test_first_screen.py) and on the real one (tests/browser/test_real_model.py)."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

HIDDEN = "rgba(0, 0, 0, 0)"
# one listed token: its text, its rank, and the reason the two methods part on it
LISTED = re.compile(r"\u201c[^\u201d]*\u201d \((?:rank \d+|not ranked)(?:; ([^)]*))?\)")


def predict_then_reveal(page: Any, scope_selector: str, opened: bool = False) -> str:
    """Hide the marks (``opened``: the scope opens with them hidden), guess three tokens (two of
    gmts's picks, one token it leaves), reveal: the score counts them, the marks come back, and
    each listed token carries its reason as the "why they differ" view in its tab states it.
    Returns the score's text."""
    scope = page.locator(scope_selector)
    toggle = scope.locator(".predict-toggle")
    if opened:
        expect(toggle).to_be_checked()
    else:
        toggle.check()
    expect(scope).to_have_class(re.compile(r"\bpredicting\b"))
    mark = scope.locator(".tok.mark-b, .tok.mark-both").first
    hidden = mark.evaluate("t => getComputedStyle(t).borderTopColor")
    assert hidden == HIDDEN, hidden  # gmts's mark hidden while predicting
    picks = scope.locator(".gmts-view .tok[data-tip].sel-b")
    total = picks.count()
    assert total >= 2
    # the wrong guess: a token only entropy picks where there is one (its reason is a row of
    # "why they differ"), else any token gmts leaves
    only_a = scope.locator(".gmts-view .tok[data-tip].sel-a:not(.sel-b)")
    other = only_a if only_a.count() else scope.locator(".gmts-view .tok[data-tip]:not(.sel-b)")
    guesses = (picks.nth(0), picks.nth(1), other)
    for guess in guesses:
        guess.first.scroll_into_view_if_needed()
        guess.first.click()
    expect(page.locator("#gmts-pin")).to_be_hidden()  # a guess, not the panel
    expect(scope.locator(".predict-count")).to_have_text("3 picked", use_inner_text=True)
    scope.locator(".predict-reveal").click()
    score = scope.locator(".predict-score").inner_text()
    want = (
        f"Score: 2 of your 3 picks are gmts\u2019s; gmts picks {total} tokens here and you found 2"
    )
    assert want in score, score
    assert "Why they differ" in score and "Your picks it left out" in score
    expect(scope.locator(".tok.guess-hit")).to_have_count(2)
    expect(scope.locator(".tok.guess-miss")).to_have_count(1)
    expect(scope.locator(".tok.guess-missed")).to_have_count(total - 2)
    shown = mark.evaluate("t => getComputedStyle(t).borderTopColor")
    assert shown != HIDDEN  # the marks are back
    check_reasons(page, scope, score)
    if only_a.count():
        assert "; only entropy" in score, score
    return score


def check_reasons(page: Any, scope: Any, score: str) -> None:
    """Every token the score lists names a reason, and each "only <method>: <reason>" is a row
    of the tab's "why they differ" view that lists that token on that method's side."""
    tab = scope.locator("xpath=ancestor::*[@role='tabpanel'][1]")
    labels = set(tab.locator(".why-differ .why-row summary b").all_inner_texts())
    reasons = LISTED.findall(score)
    assert len(reasons) >= 2 and all(reasons), score  # the missed picks and the wrong guess
    for reason in reasons:
        if reason in ("both methods pick it", "neither method picks it"):
            continue
        side, _, label = reason.partition(": ")
        assert side in ("only entropy", "only gmts"), reason
        if not label:  # the view lists a reason's first tokens only ("+N more")
            expect(tab.locator(".why-differ .why-more").first, reason).to_be_attached()
        else:
            assert label in labels, (reason, labels)
