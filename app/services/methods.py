"""The selection-method listing every front end shows (API, CLI, UI pickers).

A thin service over :func:`gmts_core.methods.catalog.method_catalog`, so routes, the CLI and the
UI reach the library through one place and show the same names, descriptions and citations.
"""

from __future__ import annotations

from gmts_core.config import DEFAULT_METHODS
from gmts_core.methods.catalog import MethodInfo, method_catalog
from gmts_core.methods.selection import default_scope, list_methods

__all__ = [
    "DEFAULT_METHODS",
    "MethodInfo",
    "list_method_infos",
    "method_names",
    "method_picker_choices",
    "scope_for",
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


def scope_for(methods: list[str] | tuple[str, ...], scope: str | None) -> str:
    """The scope a request selects in: the one given, else a lone method's own default
    (``group`` for ``gmts_paper`` and ``gmts_paper_verl``), else ``batch``."""
    if scope is not None:
        return scope
    if not set(methods) <= set(list_methods()):
        return "batch"  # an unknown name is reported, with the valid ones, by the validation
    return default_scope(methods)
