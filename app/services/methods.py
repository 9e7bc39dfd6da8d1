"""The selection-method listing every front end shows (API, CLI, UI pickers).

A thin service over :func:`gmts_core.methods.catalog.method_catalog`, so routes, the CLI and the
UI reach the library through one place and show the same names, descriptions and citations.
"""

from __future__ import annotations

from gmts_core.config import DEFAULT_METHODS
from gmts_core.methods.catalog import MethodInfo, method_catalog
from gmts_core.methods.selection import list_methods

__all__ = [
    "DEFAULT_METHODS",
    "MethodInfo",
    "list_method_infos",
    "method_names",
    "method_picker_choices",
]


def method_names() -> list[str]:
    """Every registered selection method's name, in registration order."""
    return list_methods()


def list_method_infos() -> list[MethodInfo]:
    """Every registered selection method, in registration order."""
    return method_catalog()


def method_picker_choices() -> list[tuple[str, str]]:
    """(label, value) pairs for dropdowns: "name: one-line description" -> name."""
    return [(f"{m.name}: {m.description}", m.name) for m in method_catalog()]
