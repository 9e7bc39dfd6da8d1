"""The UI's pickers, read from the backend's ``GET /v1/capabilities`` (its registries): reward
rules, selection methods with their one-line descriptions, scopes, and what tokens are shaded by.
Shared by every tab that offers a method or a rule, so no tab keeps a list of its own."""

from __future__ import annotations

from app.schemas.server import CapabilitiesResponse
from app.ui.render import COLOR_BY

EXPLICIT = "explicit rewards"  # the reward "rule" of given numbers (not a registry rule)


def reward_choices(caps: CapabilitiesResponse) -> list[str]:
    """The reward dropdown: every rule the backend offers (``GET /v1/capabilities``), then
    explicit numbers."""
    return [*caps.reward_rules, EXPLICIT]


def method_names(caps: CapabilitiesResponse) -> list[str]:
    """The selection methods the backend offers, in its registry's order."""
    return [m.name for m in caps.methods]


def method_choices(caps: CapabilitiesResponse) -> list[tuple[str, str]]:
    """The method pickers: "name: one-line description" labels, method names as values."""
    return [(f"{m.name}: {m.description}", m.name) for m in caps.methods]


SCOPE_INFO = {
    "batch": "all answer tokens of the request (every group) compete for k = ⌈ratio·N⌉ places, "
    "as in the GMTS paper and TRL",
    "group": "each prompt's group keeps its own top ratio of tokens",
    "answer": "each answer keeps its own top ratio of tokens",
}


def methods_markdown(caps: CapabilitiesResponse) -> str:
    """What each method the backend offers (``GET /v1/capabilities``) and each scope means, for
    the UI's info text (and the docs' methods page)."""
    methods = "\n".join(f"- **{m.name}**: {m.description}" for m in caps.methods)
    scopes = "\n".join(f"- **{s}**: {d}" for s, d in SCOPE_INFO.items())
    return f"**Selection methods**\n{methods}\n\n**Scopes**\n{scopes}"


def color_choices() -> list[str]:
    return list(COLOR_BY)
