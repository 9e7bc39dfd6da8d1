"""The published schemas admit exactly the numbers the server accepts (issue 36, item 11).

A session's ``ratio`` and an evaluation's ``temperature`` are checked two ways: by the JSON
Schema a client reads from ``/openapi.json`` (minimum, maximum and the excluded gap) and by the
request model plus the library's own check (``RLConfig.validate``). Both must agree on every
value, the edges of each range included.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from app.schemas.sessions import RLKnobs, SessionEvalRequest
from gmts_core.bounds import MIN_RATIO, MIN_TEMPERATURE
from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError


def _numeric_ok(schema: dict[str, Any], x: float) -> bool:
    """Whether ``x`` satisfies a numeric JSON Schema (the keywords these schemas use)."""
    if "anyOf" in schema:
        return any(_numeric_ok(s, x) for s in schema["anyOf"] if s.get("type") != "null")
    if schema.get("type") not in (None, "number", "integer"):
        return False
    ok = True
    ok &= "minimum" not in schema or x >= schema["minimum"]
    ok &= "maximum" not in schema or x <= schema["maximum"]
    ok &= "exclusiveMinimum" not in schema or x > schema["exclusiveMinimum"]
    ok &= "exclusiveMaximum" not in schema or x < schema["exclusiveMaximum"]
    if "not" in schema:
        ok &= not _numeric_ok(schema["not"], x)
    return ok


def _edges(*points: float) -> list[float]:
    """Each point and its neighbouring floats, plus 0 and a few ordinary values."""
    values = {0.0, 0.5, 1.0, 2.0, 10.0, 11.0}
    for p in points:
        values |= {p, math.nextafter(p, -math.inf), math.nextafter(p, math.inf), p / 2}
    return sorted(values)


def _ratio_accepted(x: float) -> bool:
    try:
        RLKnobs(ratio=x).apply(RLConfig()).validate()
    except (ValidationError, InvalidInputError):
        return False
    return True


def _temperature_accepted(x: float) -> bool:
    try:
        SessionEvalRequest(temperature=x)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("x", _edges(MIN_RATIO, 1.0))
def test_ratio_schema_is_what_the_server_accepts(x: float) -> None:
    schema = RLKnobs.model_json_schema()["properties"]["ratio"]
    assert _numeric_ok(schema, x) == _ratio_accepted(x), (x, schema)


@pytest.mark.parametrize("x", _edges(MIN_TEMPERATURE, 10.0))
def test_evaluate_temperature_schema_is_what_the_server_accepts(x: float) -> None:
    schema = SessionEvalRequest.model_json_schema()["properties"]["temperature"]
    assert _numeric_ok(schema, x) == _temperature_accepted(x), (x, schema)
