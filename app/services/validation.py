"""Front-end input as request models: a pydantic error becomes InvalidInputError naming fields."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gmts_core.errors import InvalidInputError

M = TypeVar("M", bound=BaseModel)


def validation_message(exc: ValidationError) -> str:
    """A pydantic error as one line per problem: ``field.path: message``."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        lines.append(f"{where}: {msg}" if where else msg)
    return "; ".join(lines)


def validated(schema: type[M], request: dict[str, Any]) -> M:
    """``request`` as ``schema``, a validation error as InvalidInputError naming the fields."""
    try:
        return schema.model_validate(request)
    except ValidationError as exc:
        raise InvalidInputError(validation_message(exc)) from None
