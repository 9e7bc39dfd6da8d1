"""OpenAPI descriptions of the error responses the /v1 routes can give."""

from __future__ import annotations

from typing import Any

from app.schemas.server import ErrorBody

_ERRORS = {
    400: "The body could not be decoded (e.g. not UTF-8).",
    401: "Missing or wrong API key (only when GMTS_API_KEY is set).",
    404: "Unknown model (the message lists the available ones) or unknown session.",
    413: "Request over a size limit (body bytes, prompt length, answers, tokens).",
    422: "Invalid request: the message names each offending field.",
    429: "Too many heavy jobs running or queued, or (with GMTS_API_KEY) too many wrong keys "
    "from this address (GMTS_KEY_FAILURES_PER_MINUTE); retry after the Retry-After header.",
    500: "An unexpected server error; the message and request_id quote the X-Request-ID header.",
    503: "The job was cancelled because the server is shutting down; retry elsewhere or later.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these statuses, always with 400 (an unparseable body), 429 (a
    client over the wrong-key limit) and 500 (an unexpected error, answered as JSON with the
    request id)."""
    every = sorted({400, 429, 500, *statuses})
    return {s: {"model": ErrorBody, "description": _ERRORS[s]} for s in every}
