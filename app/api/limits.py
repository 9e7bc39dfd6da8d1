"""Request body size limit as ASGI middleware: checks Content-Length and the bytes received.

A declared ``Content-Length`` over the limit is refused before anything is read; a body sent
without one (chunked) is counted while it streams and refused as soon as it passes the limit.
The body is buffered (it is small by then) and replayed to the app; a JSON body with a key
that appears twice in one object is refused with a 422 naming the key (``app.api.json_body``),
since which of the two values the client meant is unknown. Paths under
``exempt_prefixes`` (the Gradio UI, which has its own upload limits) pass through.

Once the body is read, the middleware keeps listening to the connection: when the client
disconnects, the request's :class:`~gmts_core.progress.CancelToken` is cancelled, so its job
leaves the queue (or stops at the next stage boundary) instead of running for nobody.
"""

from __future__ import annotations

import asyncio
import logging

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.asgi import content_length, header, json_error, read_body, send_json
from app.api.client_limits import client_address
from app.api.json_body import duplicate_key, is_json
from app.api.middleware import request_id_var
from app.services.jobs import JOB_CLIENT, JOB_LABEL, JOB_TIMING, JobTiming
from gmts_core.progress import CancelToken, cancellable

logger = logging.getLogger(__name__)

DISCONNECTED = "the client disconnected"


class BodySizeLimitMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        exempt_prefixes: tuple[str, ...] = (),
        only_prefixes: tuple[str, ...] | None = None,
    ):
        self.app = app
        self.max_bytes = max_bytes
        self.exempt_prefixes = exempt_prefixes
        self.only_prefixes = only_prefixes  # None: every path not exempt
        self.setting = "GMTS_UI_MAX_BODY_BYTES" if only_prefixes else "GMTS_MAX_BODY_BYTES"

    def _applies(self, path: str) -> bool:
        if self.exempt_prefixes and path.startswith(self.exempt_prefixes):
            return False
        return self.only_prefixes is None or path.startswith(self.only_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._applies(scope["path"]):
            await self.app(scope, receive, send)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(send, declared)
            return
        body, more_messages = await read_body(receive, self.max_bytes)
        if body is None:
            await self._too_large(send, None)
            return
        if body and await _has_duplicate_key(scope, body, send):
            return
        token = CancelToken()
        gone = asyncio.Event()
        if more_messages:  # the client left while sending the body
            gone.set()
            token.cancel(DISCONNECTED)
        watcher = None if gone.is_set() else asyncio.create_task(_watch(receive, token, gone))
        timing = JobTiming()
        label = JOB_LABEL.set(request_id_var.get())
        timed = JOB_TIMING.set(timing)
        # an API request's jobs count against its client's cap (the UI's wait in the queue)
        client = JOB_CLIENT.set(client_address(scope) if self.only_prefixes is None else None)
        try:
            with cancellable(token):
                await self.app(scope, _replay(body, gone), _with_timing(send, timing))
        finally:
            JOB_CLIENT.reset(client)
            JOB_TIMING.reset(timed)
            JOB_LABEL.reset(label)
            if watcher is not None:
                watcher.cancel()

    async def _too_large(self, send: Send, declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "more than the limit"
        message = f"request body is {size}; the limit is {self.max_bytes} bytes ({self.setting})"
        body = json_error(413, "payload_too_large", message)
        await send_json(send, 413, body, [(b"connection", b"close")])


DUPLICATE_CHECK_ON_LOOP_BYTES = 64_000  # larger bodies are parsed in a worker thread


async def _has_duplicate_key(scope: Scope, body: bytes, send: Send) -> bool:
    """Answer 422 (and return True) when the JSON body repeats a key within one object."""
    content_type = header(scope, b"content-type")
    if content_type is not None and not is_json(content_type):
        return False
    if len(body) > DUPLICATE_CHECK_ON_LOOP_BYTES:
        key = await anyio.to_thread.run_sync(duplicate_key, body)
    else:
        key = duplicate_key(body)
    if key is None:
        return False
    message = f"body: the key {key!r} appears twice in one object; give each field once"
    detail = {"field": "body", "message": message, "type": "duplicate_key"}
    error = json_error(422, "validation_error", message, details=[detail])
    await send_json(send, 422, error, [])
    return True


def _with_timing(send: Send, timing: JobTiming) -> Send:
    """``send`` that adds ``X-Queue-Wait-S`` and ``X-Work-S`` when the request ran jobs."""

    async def timed(message: Message) -> None:
        if message["type"] == "http.response.start" and timing.jobs:
            headers = [
                *message.get("headers", []),
                (b"x-queue-wait-s", f"{timing.queued_s:.3f}".encode()),
                (b"x-work-s", f"{timing.work_s:.3f}".encode()),
            ]
            message = {**message, "headers": headers}
        await send(message)

    return timed


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
