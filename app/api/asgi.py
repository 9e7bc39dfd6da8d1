"""The raw-ASGI pieces every middleware of the API shares, written once: reading a header and
the declared body size, reading a body up to a limit, and answering with a JSON error.

The middlewares (:mod:`app.api.hosts`, :mod:`app.api.middleware`, :mod:`app.api.limits`,
:mod:`app.api.client_limits`) run before FastAPI parses anything, so they speak ASGI
messages; a JSON error body has the same ``{"error": {"code", "message"}}`` shape as the
routes' (:mod:`app.api.errors`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Message, Receive, Scope, Send


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case), or None."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def content_length(scope: Scope) -> int | None:
    """The declared body size (``Content-Length``), or None when absent or not a number."""
    value = header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


async def read_body(receive: Receive, max_bytes: int) -> tuple[bytes | None, list[Message]]:
    """The whole body, or None once it passes ``max_bytes`` (the rest is not read); and the
    message that ended it early, if the client left while sending it (a disconnect)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), [message]
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            return None, []
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), []


def json_error(status: int, code: str, message: str, **extra: Any) -> bytes:
    """The API's error body: ``{"error": {"code", "message", ...}}``."""
    return json.dumps({"error": {"code": code, "message": message, **extra}}).encode()


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer with a JSON ``body`` (its content type and length set) and ``headers``."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
