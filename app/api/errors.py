"""Every error as JSON ``{"error": {"code", "message"}}`` with the right HTTP status.

Library errors (gmts_core.errors) and service errors map by type; request validation becomes a
422 whose message names each offending field; running out of (GPU) memory is a 503 with
``Retry-After``; anything unexpected is logged and answered with a plain 500 that leaks no
internals.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.services.errors import (
    JobNotFoundError,
    QueueFullError,
    RunNotFoundError,
    SessionNotFoundError,
)
from gmts_core.errors import (
    GMTSError,
    InvalidInputError,
    LimitExceededError,
    ModelLoadError,
    ModelNotFoundError,
    NonFiniteLogitsError,
)
from gmts_core.progress import Cancelled

logger = logging.getLogger(__name__)


class UnauthorizedError(GMTSError):
    """A /v1 request without the right bearer API key."""

    code = "unauthorized"


# Most specific first: the first class in an error's MRO found here decides its status.
STATUS_BY_ERROR: dict[type[GMTSError], int] = {
    UnauthorizedError: 401,
    ModelNotFoundError: 404,
    SessionNotFoundError: 404,
    RunNotFoundError: 404,
    JobNotFoundError: 404,
    LimitExceededError: 413,
    NonFiniteLogitsError: 422,
    ModelLoadError: 422,
    InvalidInputError: 422,
    QueueFullError: 429,
    Cancelled: 503,
    GMTSError: 400,
}

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, **extra}}
    return JSONResponse(body, status_code=status, headers=headers)


def status_for(exc: GMTSError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 400


async def gmts_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GMTSError)
    headers: dict[str, str] = {}
    if isinstance(exc, QueueFullError):
        headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, Cancelled):  # the client left (nobody reads this) or shutdown
        logger.info("job cancelled: %s", exc.reason)
        headers["Retry-After"] = "5"
    if isinstance(exc, UnauthorizedError):
        headers["WWW-Authenticate"] = "Bearer"
    return error_response(status_for(exc), exc.code, str(exc), headers or None)


def _clean(msg: object) -> str:
    return str(msg).removeprefix("Value error, ")


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(p) for p in loc)


def _message(e: dict[str, Any]) -> str:
    """A validation error in plain words (JSON syntax errors say what and where)."""
    if e.get("type") == "json_invalid":
        loc = e.get("loc", ())
        pos = loc[-1] if loc and isinstance(loc[-1], int) else None
        what = str((e.get("ctx") or {}).get("error", "invalid JSON"))
        where = f" at character {pos}" if pos is not None else ""
        return f"the request body is not valid JSON: {what}{where}"
    return _clean(e.get("msg"))


def _where(e: dict[str, Any]) -> str:
    if e.get("type") == "json_invalid":
        return "body"
    return _field(e.get("loc", ()))


async def validation_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    details = [
        {"field": _where(e), "message": _message(e), "type": e.get("type")}
        for e in errors[:MAX_DETAILS]
    ]
    message = "; ".join(f"{d['field']}: {d['message']}" for d in details) or "invalid request"
    if len(errors) > MAX_DETAILS:  # the first few, and how many in all (never every item)
        message += f"; and {len(errors) - MAX_DETAILS:,} more problems ({len(errors):,} in all)"
    return error_response(422, "validation_error", message, details=details)


MAX_DETAILS = 5


_UNPARSEABLE = "There was an error parsing the body"  # FastAPI's words for a body it cannot read
_UNPARSEABLE_PLAIN = (
    "the request body could not be read as JSON: it may not be UTF-8, nest too deeply, or "
    "hold a number too long to read (more than 4300 digits)"
)


async def http_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    headers = dict(exc.headers) if exc.headers else None
    message = _UNPARSEABLE_PLAIN if exc.detail == _UNPARSEABLE else str(exc.detail)
    return error_response(exc.status_code, code, message, headers)


OUT_OF_MEMORY_RETRY_AFTER_S = 10


async def out_of_memory_handler(_request: Request, exc: Exception) -> JSONResponse:
    """The request needed more memory than the device had. Base models are never written to,
    so the server keeps serving; the next, smaller request may well fit."""
    logger.error("out of memory: %s", exc)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # give the cached blocks back before the next request
    message = (
        "the server ran out of memory for this request; retry later or ask for less "
        "(fewer or shorter answers, fewer groups)"
    )
    headers = {"Retry-After": str(OUT_OF_MEMORY_RETRY_AFTER_S)}
    return error_response(503, "out_of_memory", message, headers)


async def unexpected_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """Normally unreached: app.api.middleware.RequestIdMiddleware answers unhandled errors
    first (without re-raising them, which would reset the client's connection)."""
    logger.exception("unexpected error", exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(GMTSError, gmts_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(torch.OutOfMemoryError, out_of_memory_handler)
    app.add_exception_handler(Exception, unexpected_error_handler)
