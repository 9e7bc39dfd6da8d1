"""The Learn tab's wiring: it renders the Learn view that Explore's handlers fill
(``ctx.learn_view``, built by :func:`app.ui.tabs.learn.learn.learn_html`)."""

from __future__ import annotations

from app.ui.context import Tab, UIContext


def build_learn_tab(ctx: UIContext) -> None:
    """Learn: the formulas with the current group's numbers (filled by Explore's handlers)."""
    if ctx.learn_view is None:
        raise RuntimeError("the Learn tab needs the Explore tab built before it")
    ctx.learn_view.render()


TAB = Tab("Learn", "learn", build_learn_tab)
