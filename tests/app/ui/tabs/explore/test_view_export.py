"""The HTML export names its group as the live page does (numbered from 0)."""

from __future__ import annotations

from app.ui.tabs.explore import example
from app.ui.tabs.explore.view_export import group_label, view_html


def test_the_export_numbers_groups_from_zero_like_the_page() -> None:
    shipped = example.load_example()
    assert shipped is not None and len(shipped["groups"]) == 4
    pages = [view_html(shipped, ("entropy", "gmts"), "entropy", g) for g in range(4)]
    for g, page in enumerate(pages):
        assert f"group {g} of groups 0–3" in page
        assert f"group {g + 1} of 4" not in page and "of 4 —" not in page
    assert group_label(0, 1) == "its one group"
