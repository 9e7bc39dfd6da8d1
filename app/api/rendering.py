"""Response bodies rendered off the event loop.

An in-limit analysis can hold tens of thousands of tokens (a 16,000-character answer, each
token with its statistics and alternatives): building its response model and turning it into
JSON or CSV is seconds of pure Python. On the event loop that would freeze every other request,
``/healthz`` included, so routes with large bodies render them in a worker thread (inside the
job, see :meth:`app.services.analysis.AnalysisService.analyze`, or with
:func:`json_response`) and return the finished bytes, which FastAPI sends as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
from fastapi.responses import Response
from pydantic import BaseModel


def json_bytes(model: BaseModel, exclude_unset: bool = False) -> bytes:
    """The model's JSON (non-finite numbers as null, as the response models declare), the
    same object as ``model.model_dump_json()`` gives, serialised piece by piece."""
    return b"".join(_chunks(model, exclude_unset))


def _model_lists(model: BaseModel, exclude_unset: bool) -> list[str]:
    """The fields of ``model`` holding a non-empty list of models (dumped element by element)."""
    names = model.model_fields_set if exclude_unset else type(model).model_fields
    return [
        name
        for name in type(model).model_fields
        if name in names
        and isinstance(value := getattr(model, name), list)
        and value
        and all(isinstance(v, BaseModel) for v in value)
    ]


def _chunks(model: BaseModel, exclude_unset: bool) -> Iterator[bytes]:
    """JSON pieces of ``model``: one pydantic call per list element, never one for the whole.

    pydantic-core holds the interpreter for the whole of one ``model_dump_json``: for a body of
    tens of MB that is seconds in which no other thread (the event loop) runs. Element by
    element, each call is short and the loop gets its turn between them. Fields holding lists
    of models come last in their object (JSON objects are unordered)."""
    lists = _model_lists(model, exclude_unset)
    head = model.model_dump_json(exclude_unset=exclude_unset, exclude=set(lists)).encode()
    if not lists:
        yield head
        return
    yield head[:-1]
    first = head == b"{}"
    for name in lists:
        yield (b"" if first else b",") + json.dumps(name).encode() + b":["
        first = False
        for i, item in enumerate(getattr(model, name)):
            if i:
                yield b","
            yield from _chunks(item, exclude_unset)
        yield b"]"
    yield b"}"


def json_body(content: bytes, status_code: int = 200) -> Response:
    return Response(content, status_code=status_code, media_type="application/json")


async def json_response(
    model: BaseModel, exclude_unset: bool = False, status_code: int = 200
) -> Response:
    """``model`` as a JSON response, serialised in a worker thread."""
    content = await anyio.to_thread.run_sync(json_bytes, model, exclude_unset)
    return json_body(content, status_code)


def json_dict(model: BaseModel, exclude_unset: bool = True) -> dict[str, Any]:
    """``model.model_dump(mode="json")`` built element by element (see :func:`_chunks`)."""
    lists = _model_lists(model, exclude_unset)
    out: dict[str, Any] = model.model_dump(
        mode="json", exclude_unset=exclude_unset, exclude=set(lists)
    )
    for name in lists:
        out[name] = [json_dict(item, exclude_unset) for item in getattr(model, name)]
    return out
