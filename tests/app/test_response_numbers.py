"""NaN and +-inf through every float of every response model: null in the model, in the JSON
dict the UI and CLI print (``as_json``) and in the HTTP body (pydantic's JSON, as FastAPI
writes it). The models are enumerated from the routers of ``app.api.routes``, so a new route's
response inherits the test; a field type the walker does not know fails it (extend
:func:`sample`)."""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

import app.api.routes as routes_package
from app.schemas.numbers import finite, finite_or_none, num
from app.services.responses import as_json

NON_FINITE = [math.nan, math.inf, -math.inf]
Path = tuple[str, ...]


def response_models() -> dict[str, type[BaseModel]]:
    models: dict[str, type[BaseModel]] = {}
    for info in pkgutil.iter_modules(routes_package.__path__):
        module = importlib.import_module(f"{routes_package.__name__}.{info.name}")
        router = getattr(module, "router", None)
        for route in router.routes if router is not None else []:
            if isinstance(route, APIRoute) and route.response_model is not None:
                models[route.response_model.__name__] = route.response_model
    return models


MODELS = response_models()


def sample(tp: Any, bad: float, path: Path, floats: list[Path]) -> Any:
    """A valid value of type ``tp`` with ``bad`` in every float, whose paths go to ``floats``."""
    origin = get_origin(tp)
    if origin is Annotated:
        return sample(get_args(tp)[0], bad, path, floats)
    if tp is float:
        floats.append(path)
        return bad
    simple = {int: 0, str: "x", bool: False, type(None): None}
    if tp in simple:
        return simple[tp]
    if tp is Any:
        return None
    if origin is Literal:
        return get_args(tp)[0]
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        floaty = [a for a in options if float in (a, *get_args(a))]
        return sample((floaty or options)[0], bad, path, floats)
    if origin in (list, tuple):
        return [sample(get_args(tp)[0], bad, (*path, "[]"), floats)]
    if origin is dict:
        key, value = get_args(tp)
        return {sample(key, bad, path, []): sample(value, bad, (*path, "{}"), floats)}
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {
            name: sample(field.annotation, bad, (*path, name), floats)
            for name, field in tp.model_fields.items()
        }
    raise TypeError(f"{'.'.join(path)}: no sample for {tp!r}; extend sample()")


def at(body: Any, path: Path) -> Any:
    for step in path:
        if step == "[]":
            body = body[0]
        else:
            body = next(iter(body.values())) if step == "{}" else body[step]
    return body


def test_the_routes_are_found() -> None:
    assert {"AnalyzeResponse", "GradcheckResponse", "SessionOut", "RunStepResponse"} <= set(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_non_finite_numbers_are_null_in_every_response(name: str) -> None:
    model = MODELS[name]
    for bad in NON_FINITE:
        floats: list[Path] = []
        built = model.model_validate(sample(model, bad, (), floats))
        python, printed = built.model_dump(), as_json(built)
        http = json.loads(built.model_dump_json())
        json.dumps(printed, allow_nan=False)  # raises on NaN or infinity
        for path in floats:
            where = f"{name}.{'.'.join(path)} = {bad}"
            assert at(python, path) is None, where  # the field is Num: null in the model
            assert at(printed, path) is None, where
            assert at(http, path) is None, where


def test_the_rule() -> None:
    assert [finite_or_none(v) for v in NON_FINITE] == [None, None, None]
    assert finite_or_none(1.5) == 1.5 and finite_or_none("nan") == "nan"
    assert [num(v) for v in NON_FINITE] == [None, None, None] and num(2) == 2.0
    nested = {"a": [math.nan, 1.0, (math.inf, -math.inf)], "b": {"c": -math.inf, "d": 0.0}}
    assert finite(nested) == {"a": [None, 1.0, [None, None]], "b": {"c": None, "d": 0.0}}
