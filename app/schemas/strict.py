"""Request models that refuse ``true``/``false`` where a number (or text) is expected.

Pydantic's lax mode reads ``"ratio": true`` as 1.0 and ``"seed": false`` as 0; a client that
sends a boolean there has a bug, so it gets a 422 naming the field instead. Fields typed
``bool`` (or a union with it) take booleans as usual.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, model_validator


def _admits_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(a) for a in typing.get_args(annotation) if a is not type(None))


def _element_type(annotation: Any) -> Any:
    """``list[X] | None`` -> X (else None)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is list:
            args = typing.get_args(candidate)
            return args[0] if args else Any
    return None


class NoBoolNumbers(BaseModel):
    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            if name not in data:
                continue
            value, annotation = data[name], field.annotation
            if isinstance(value, bool) and not _admits_bool(annotation):
                raise ValueError(f"{name}: expected a number or text, got {str(value).lower()}")
            element = _element_type(annotation)
            if isinstance(value, list) and element is not None and not _admits_bool(element):
                for i, item in enumerate(value):
                    if isinstance(item, bool):
                        raise ValueError(
                            f"{name}[{i}]: expected a number or text, got {str(item).lower()}"
                        )
        return data
