"""Response bodies rendered off the event loop.

An in-limit analysis can hold tens of thousands of tokens (a 16,000-character answer, each
token with its statistics and alternatives): building its response model and turning it into
JSON or CSV is seconds of pure Python. On the event loop that would freeze every other request,
``/healthz`` included, so routes with large bodies render them in a worker thread (inside the
job, see :meth:`app.services.analysis.AnalysisService.analyze_rendered`, or with
:func:`json_response`) and return the finished bytes, which FastAPI sends as they are.
"""

from __future__ import annotations

import anyio.to_thread
from fastapi.responses import Response
from pydantic import BaseModel


def json_bytes(model: BaseModel, exclude_unset: bool = False) -> bytes:
    """The model's JSON (non-finite numbers as null, as the response models declare)."""
    return model.model_dump_json(exclude_unset=exclude_unset).encode()


def json_body(content: bytes, status_code: int = 200) -> Response:
    return Response(content, status_code=status_code, media_type="application/json")


async def json_response(
    model: BaseModel, exclude_unset: bool = False, status_code: int = 200
) -> Response:
    """``model`` as a JSON response, serialised in a worker thread."""
    content = await anyio.to_thread.run_sync(json_bytes, model, exclude_unset)
    return json_body(content, status_code)
