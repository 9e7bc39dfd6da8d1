"""app.ui.tables: a table whose every value names its column, escaped."""

from __future__ import annotations

from app.ui.tables import card_table


def test_every_value_names_its_column_and_text_is_escaped() -> None:
    html = card_table(["method", "ρ", "<b>kept</b>"], [["<gmts>", 0.5, None]], "fidelity")
    assert html.startswith("<table class='card-table' aria-label='fidelity'>")
    assert "<th scope='row'>&lt;gmts&gt;</th>" in html  # the row's name, escaped
    assert "<td data-label='ρ'>0.5</td>" in html
    assert "<td data-label='&lt;b&gt;kept&lt;/b&gt;'>—</td>" in html  # None shows as —
    assert html.count("<th scope='col'>") == 3 and "<b>" not in html
