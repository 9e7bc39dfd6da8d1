"""Tables as HTML that a phone shows as cards (pure, no Gradio).

A table on a wide screen; under 640 px (``.card-table`` in static/gmts.css) one card per row,
the row's first cell as its title and every other value under its column's name
(``data-label``), so no table is wider than its column and nothing scrolls sideways. Every text
is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any


def _text(value: Any) -> str:
    return "—" if value is None else escape(str(value))


def card_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], label: str = "") -> str:
    """``rows`` (their first cell names the row; None shows as —) under ``headers``;
    ``label``, if given, is the table's accessible name."""
    head = "".join(f"<th scope='col'>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = [f"<th scope='row'>{_text(row[0])}</th>"]
        cells += [
            f"<td data-label='{escape(h)}'>{_text(v)}</td>"
            for h, v in zip(headers[1:], row[1:], strict=True)
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    name = f" aria-label='{escape(label)}'" if label else ""
    return (
        f"<table class='card-table'{name}><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )
