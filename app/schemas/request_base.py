"""Strict request models: no lax coercion, no contradictory fields, the rules in the schema.

- :class:`StrictRequest` refuses ``true``/``false`` where a number (or text) is expected and
  text where a number is expected: pydantic's lax mode reads ``"ratio": true`` as 1.0 and
  ``"seed": "7"`` as 7; a client that sends them has a bug, so it gets a 422 naming the field.
  Boolean fields are typed :data:`StrictBool` (``0``, ``"yes"`` are refused).
- :func:`refuse_together` refuses a pair of fields that contradict each other or make no sense
  together (``answers`` with ``answer_ids``): the 422 names both.
- :func:`schema_rules` states the same rules in the OpenAPI schema (``not`` of both fields
  present and non-null, ``oneOf`` of two forms), so the contract says what the server checks.
- :func:`registry_enum` lists a registry's names as the field's ``enum`` in the schema.
- :data:`MIN_RATIO`: a selection ratio below it gives k = ceil(ratio * N) = 0 (nothing selected).
- A list field longer than its declared ``max_length`` (:data:`MAX_LIST_ITEMS` where none is
  declared) is refused before any of its items is looked at: the cost of a request's
  validation is bounded by these caps, not by the body's size.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from annotated_types import MaxLen
from pydantic import BaseModel, Strict, model_validator

from gmts_core.bounds import MIN_RATIO

MAX_LIST_ITEMS = 4096  # a list field's items where its model declares no max_length

StrictBool = Annotated[bool, Strict()]
"""A JSON boolean and nothing else (``0``, ``1``, ``"true"`` are refused)."""

JsonSchema = dict[str, Any]


def _admits(annotation: Any, kind: type) -> bool:
    if annotation is kind or annotation is Any:
        return True
    return any(_admits(a, kind) for a in typing.get_args(annotation) if a is not type(None))


def _is_number(annotation: Any) -> bool:
    return _admits(annotation, int) or _admits(annotation, float)


def _element_type(annotation: Any) -> Any:
    """``list[X] | None`` -> X (else None)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is list:
            args = typing.get_args(candidate)
            return args[0] if args else Any
    return None


def _lax_value_error(name: str, value: Any, annotation: Any) -> str | None:
    """Why ``value`` would only pass by lax coercion into ``annotation`` (None: it is fine)."""
    if isinstance(value, bool) and not _admits(annotation, bool):
        return f"{name}: expected a number or text, got {str(value).lower()}"
    if isinstance(value, str) and _is_number(annotation) and not _admits(annotation, str):
        return f"{name}: expected a number, got the text {value[:40]!r}"
    return None


class StrictRequest(BaseModel):
    """A request model whose scalar fields take their own JSON type only."""

    @model_validator(mode="before")
    @classmethod
    def _no_lax_scalars(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            value = data.get(name)
            if isinstance(value, list):
                cap = next(
                    (m.max_length for m in field.metadata if isinstance(m, MaxLen)),
                    MAX_LIST_ITEMS,
                )
                if len(value) > cap:
                    raise ValueError(f"{name}: {len(value):,} items; at most {cap:,}")
        for name, field in cls.model_fields.items():
            if name not in data:
                continue
            value, annotation = data[name], field.annotation
            problem = _lax_value_error(name, value, annotation)
            element = _element_type(annotation)
            if problem is None and isinstance(value, list) and element is not None:
                for i, item in enumerate(value):
                    problem = _lax_value_error(f"{name}[{i}]", item, element)
                    if problem:
                        break
            if problem:
                raise ValueError(problem)
        return data


def refuse_together(model: BaseModel, pairs: Iterable[tuple[str, str, str]]) -> None:
    """A 422 naming both fields of the first pair ``(a, b, why)`` that are both given."""
    for a, b, why in pairs:
        if getattr(model, a, None) is not None and getattr(model, b, None) is not None:
            raise ValueError(f"give either {a} or {b}, not both: {why}")


def check_ratio(ratio: float | None) -> float | None:
    """``ratio`` unless it selects no token at all (k = ceil(ratio * N) rounds to 0)."""
    if ratio is not None and not isinstance(ratio, bool) and 0 < ratio < MIN_RATIO:
        raise ValueError(
            f"ratio {ratio:g} selects no token (k = ceil(ratio * N) is 0 for any batch); "
            f"use a ratio of at least {MIN_RATIO:g}"
        )
    return ratio


def _present(name: str) -> JsonSchema:
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


def not_both(a: str, b: str) -> JsonSchema:
    """JSON Schema: fields ``a`` and ``b`` are not both present with non-null values."""
    both = {
        "required": [a, b],
        "properties": {a: {"not": {"type": "null"}}, b: {"not": {"type": "null"}}},
    }
    return {"not": both}


def one_of_forms(*names: str) -> JsonSchema:
    """JSON Schema: exactly one of ``names`` is present with a non-null value."""
    return {"oneOf": [_present(n) for n in names]}


def schema_rules(
    pairs: Iterable[tuple[str, str, str]] = (),
    forms: tuple[str, ...] = (),
    extra: Iterable[JsonSchema] = (),
    examples: list[dict[str, Any]] | None = None,
) -> Callable[[JsonSchema], None]:
    """A ``json_schema_extra`` that adds the cross-field rules to a model's schema."""
    rules = [not_both(a, b) for a, b, _ in pairs] + list(extra)

    def add(schema: JsonSchema) -> None:
        all_of = list(rules)
        if forms:
            all_of.append(one_of_forms(*forms))
        if all_of:
            schema["allOf"] = all_of
        if examples:
            schema["examples"] = examples

    return add


def registry_enum(names: Callable[[], list[str]]) -> Callable[[JsonSchema], None]:
    """A field ``json_schema_extra``: the registry's names (read when the schema is built)."""

    def add(schema: JsonSchema) -> None:
        target = schema
        if "anyOf" in schema:  # optional field: the string branch
            target = next(s for s in schema["anyOf"] if s.get("type") == "string")
        if schema.get("type") == "array":
            target = schema["items"]
        target["enum"] = names()

    return add
