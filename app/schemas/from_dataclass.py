"""Response models whose fields are a library dataclass's, so each field list is written once.

A library result such as :class:`gmts_core.grpo.records.AnswerChange` is a plain dataclass with raw
floats; its response model takes the dataclass's fields (names, order and types) and gives every
float the JSON type :data:`app.schemas.numbers.Num` (NaN and infinity become null). Every field is
required: a body built from a result always carries them all. The model's class
statement keeps its name, docstring and config; :func:`fields_from` adds the fields::

    @fields_from(AnswerChange, tokens=list[TokenChangeOut])
    class AnswerChangeOut(BaseModel):
        \"\"\"One answer of the batch.\"\"\"

        model_config = ConfigDict(from_attributes=True)
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union, cast, get_args, get_origin

from pydantic import BaseModel, create_model

from app.schemas.numbers import Num

M = TypeVar("M", bound=BaseModel)
_NONE = type(None)


def json_type(tp: Any) -> Any:
    """``tp`` as a JSON body carries it: ``float`` and ``float | None`` (also inside ``list``,
    ``dict`` and ``tuple``) become :data:`Num`; other types stay as they are."""
    origin = get_origin(tp)
    if tp is float:
        return Num
    if origin in (Union, types.UnionType):
        args = set(get_args(tp))
        return Num if args == {float, _NONE} else tp
    if origin in (list, dict, tuple):
        return origin[tuple(json_type(a) for a in get_args(tp))]
    return tp


def fields_from(source: type, **types_: Any) -> Callable[[type[M]], type[M]]:
    """A class decorator: the pydantic model with the fields of the dataclass ``source``.

    Each keyword gives a field's type where :func:`json_type` is not what the body needs (a
    nested response model, a ``Literal``), or adds a field after the dataclass's (a property of
    ``source``, read when the model is built with ``from_attributes``).
    """
    hints = typing.get_type_hints(source)

    def build(model: type[M]) -> type[M]:
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(source):
            tp = types_[f.name] if f.name in types_ else json_type(hints[f.name])
            fields[f.name] = (tp, ...)
        for name, tp in types_.items():
            fields.setdefault(name, (tp, ...))
        derived = create_model(
            model.__name__,
            __base__=model,
            __module__=model.__module__,
            __doc__=model.__doc__,
            **fields,
        )
        return cast("type[M]", derived)

    return build
