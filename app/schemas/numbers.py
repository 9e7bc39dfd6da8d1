"""Numbers in response bodies: JSON cannot carry NaN or infinity, so a non-finite float in a
response is null. This is the one rule: every response model's float is :data:`Num`, and the
services' mapping uses :func:`num` / :func:`finite`, all three built on
:func:`finite_or_none` (``tests/app/test_response_numbers.py`` sends NaN and +-inf through
every float of every route's response model)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator


def finite_or_none(value: Any) -> Any:
    """The rule: a non-finite float is None; anything else is returned as it is."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def num(x: float) -> float | None:
    """A number for a response body: ``float(x)``, or None where it is NaN or infinite."""
    return finite_or_none(float(x))


def finite(value: Any) -> Any:
    """:func:`finite_or_none` applied to every float inside dicts, lists and tuples."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return finite_or_none(value)


# a float in a response model: NaN and infinity become null
Num = Annotated[float | None, BeforeValidator(finite_or_none)]
