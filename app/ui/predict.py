"""Predict, then reveal: the bar above a token view, in Explore and in Learn (one implementation:
this bar and its script in static/gmts.js).

Turned on, it hides both methods' marks; the reader clicks the tokens they think one method
(A or B, chosen in the bar) will pick, then **Reveal** shows the marks again, each guess as hit
or miss, the picks they did not find, and a score computed in the page from the same classes
the marks are drawn from (``sel-a``/``sel-b``, static/gmts.js), with the method's ranks of the
tokens that decided it and, for each, its reason from "Why they differ" (the view's row that
lists the token) where the two methods part.
"""

from __future__ import annotations

from html import escape


def predict_bar(methods: tuple[str, str], predicting: bool = False) -> str:
    """The bar's HTML for methods ``(A, B)`` (B, the second, is the one asked first);
    ``predicting``: it opens with the picks hidden."""
    a, b = (escape(m) for m in methods)
    on = " checked" if predicting else ""
    return (
        '<div class="predict-bar">'
        f'<label class="predict-label"><input type="checkbox" class="predict-toggle"{on}> '
        "<b>Predict, then reveal</b></label> "
        '<span class="predict-how">hide the picks, click the tokens you think '
        '<select class="predict-method" aria-label="the method to predict">'
        f'<option value="b">{b}</option><option value="a">{a}</option></select> '
        "will pick, then</span> "
        f'<button type="button" class="predict-reveal"{"" if predicting else " disabled"}>'
        "Reveal</button> "
        '<span class="predict-count"></span>'
        '<div class="predict-score" role="status" aria-live="polite"></div>'
        "</div>"
    )


def with_predict_bar(
    tokens_html: str, methods: tuple[str, str], predicting: bool = False, reasons: str = ""
) -> str:
    """The token view with the bar above it, both in one scope the page's script works in
    (``predicting``: opened with the picks hidden; ``reasons``: a "why they differ" view kept
    in the scope and shown once the picks are revealed)."""
    cls = "predict-scope predicting" if predicting else "predict-scope"
    hidden = f'<div class="predict-reasons">{reasons}</div>' if reasons else ""
    return f'<div class="{cls}">{predict_bar(methods, predicting)}{tokens_html}{hidden}</div>'
