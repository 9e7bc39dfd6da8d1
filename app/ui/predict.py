"""Predict, then reveal: the bar above Explore's token view.

Turned on, it hides both methods' marks; the reader clicks the tokens they think one method
(A or B, chosen in the bar) will pick, then **Reveal** shows the marks again, each guess as hit
or miss, the picks they did not find, and a score computed in the page from the same classes
the marks are drawn from (``sel-a``/``sel-b``, static/gmts.js), with the method's ranks of the
tokens that decided it and a pointer to "Why they differ" for the reasons the two methods part.
"""

from __future__ import annotations

from html import escape


def predict_bar(methods: tuple[str, str]) -> str:
    """The bar's HTML for methods ``(A, B)`` (B, the second, is the one asked first)."""
    a, b = (escape(m) for m in methods)
    return (
        '<div class="predict-bar">'
        '<label class="predict-label"><input type="checkbox" class="predict-toggle"> '
        "<b>Predict, then reveal</b></label> "
        '<span class="predict-how">hide the picks, click the tokens you think '
        '<select class="predict-method" aria-label="the method to predict">'
        f'<option value="b">{b}</option><option value="a">{a}</option></select> '
        "will pick, then</span> "
        '<button type="button" class="predict-reveal" disabled>Reveal</button> '
        '<span class="predict-count"></span>'
        '<div class="predict-score" role="status" aria-live="polite"></div>'
        "</div>"
    )


def with_predict_bar(tokens_html: str, methods: tuple[str, str]) -> str:
    """The token view with the bar above it, both in one scope the page's script works in."""
    return f'<div class="predict-scope">{predict_bar(methods)}{tokens_html}</div>'
