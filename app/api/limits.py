"""Request body size limit as ASGI middleware: checks Content-Length and the bytes received.

A declared ``Content-Length`` over the limit is refused before anything is read; a body sent
without one (chunked) is counted while it streams and refused as soon as it passes the limit.
The body is buffered (it is small by then) and replayed to the app. Paths under
``exempt_prefixes`` (the Gradio UI, which has its own upload limits) pass through.

Once the body is read, the middleware keeps listening to the connection: when the client
disconnects, the request's :class:`~gmts_core.cancel.CancelToken` is cancelled, so its job
leaves the queue (or stops at the next stage boundary) instead of running for nobody.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.services.jobs import CancelToken, cancellable

logger = logging.getLogger(__name__)

DISCONNECTED = "the client disconnected"


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, exempt_prefixes: tuple[str, ...] = ()):
        self.app = app
        self.max_bytes = max_bytes
        self.exempt_prefixes = exempt_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.exempt_prefixes):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(send, declared)
            return
        body, more_messages = await self._read_body(receive)
        if body is None:
            await self._too_large(send, None)
            return
        token = CancelToken()
        gone = asyncio.Event()
        if more_messages:  # the client left while sending the body
            gone.set()
            token.cancel(DISCONNECTED)
        watcher = None if gone.is_set() else asyncio.create_task(_watch(receive, token, gone))
        try:
            with cancellable(token):
                await self.app(scope, _replay(body, gone), send)
        finally:
            if watcher is not None:
                watcher.cancel()

    async def _read_body(self, receive: Receive) -> tuple[bytes | None, list[Message]]:
        """The whole body, or None once it passes the limit; a disconnect is passed on."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), [message]
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None, []
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), []

    async def _too_large(self, send: Send, declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "more than the limit"
        payload: dict[str, Any] = {
            "error": {
                "code": "payload_too_large",
                "message": f"request body is {size}; the limit is {self.max_bytes} bytes "
                "(GMTS_MAX_BODY_BYTES)",
            }
        }
        data = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _watch(receive: Receive, token: CancelToken, gone: asyncio.Event) -> None:
    """Wait for the client to go (the only message after the body is a disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            token.cancel(DISCONNECTED)
            logger.debug("client disconnected: its job (if any) is cancelled")
            gone.set()
            return


def _replay(body: bytes, gone: asyncio.Event) -> Receive:
    """The buffered body, then (like the server's own receive) a disconnect once it happens."""
    queue: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if queue:
            return queue.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    return replay
