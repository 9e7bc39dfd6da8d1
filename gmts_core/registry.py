"""A tiny named-function registry, shared by every family of variants.

Selection methods, advantage estimators, loss aggregations and reward rules are each a
`Registry`; unknown names raise an error that lists the valid ones, and the UI's dropdowns
read `names()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from gmts_core.errors import UnknownNameError

F = TypeVar("F")


class Registry(Generic[F]):
    """Named variants (functions or small objects) of one kind, named in error messages."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def wrap(fn: F) -> F:
            self._items[name] = fn
            return fn

        return wrap

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items
