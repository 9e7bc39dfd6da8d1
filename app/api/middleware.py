"""ASGI middleware: request ids, a last-resort JSON 500, and the API key before the body.

- :class:`RequestIdMiddleware` (outermost) gives every request an id (the client's
  ``X-Request-ID`` when it is a short token, else a new one), returns it in the
  ``X-Request-ID`` response header and puts it in every log line of the request (a logging
  filter adds ``request_id``). An exception nothing else handled becomes the documented JSON
  500 ``{"error": {"code": "internal_error", "message": ..., "request_id": ...}}``, logged with
  the id; it is *not* re-raised, so the server keeps the keep-alive connection open instead
  of resetting it.
- :class:`ApiKeyMiddleware` answers a ``/v1`` request without the right bearer key with 401
  before its body is read or parsed (an unparseable body without a key is a 401, not a 422).
"""

from __future__ import annotations

import contextvars
import hmac
import json
import logging
import re
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_ID = re.compile(r"[A-Za-z0-9._\-]{1,64}")
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` (the current request's id, or ``-``) to every log record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


def install_request_id_logging() -> None:
    """Attach the filter to the root handlers and the uvicorn loggers (idempotent)."""
    targets = [
        logging.getLogger(),
        logging.getLogger("uvicorn"),
        logging.getLogger("uvicorn.error"),
    ]
    for lg in targets:
        for handler in lg.handlers:
            if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
                handler.addFilter(RequestIdFilter())


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def json_error(status: int, code: str, message: str, **extra: Any) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, **extra}}).encode()


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
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


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        rid = given if given and _VALID_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            logger.exception(
                "unexpected error in %s %s (request %s)",
                scope.get("method"),
                scope.get("path"),
                rid,
            )
            if not started:
                body = json_error(
                    500,
                    "internal_error",
                    f"internal server error; quote request id {rid} when reporting it",
                    request_id=rid,
                )
                await send_json(send, 500, body, [(b"x-request-id", rid.encode())])
        finally:
            request_id_var.reset(token)


class ApiKeyMiddleware:
    """401 for ``/v1`` requests without ``Authorization: Bearer <key>``, before the body."""

    def __init__(self, app: ASGIApp, api_key: str, prefix: str = "/v1") -> None:
        self.app = app
        self.expected = api_key.encode()
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (
            path == self.prefix or path.startswith(self.prefix + "/")
        ):
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "OPTIONS":  # CORS preflight carries no credentials
            await self.app(scope, receive, send)
            return
        auth = _header(scope, b"authorization") or ""
        scheme, _, given = auth.partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.expected
        )
        if ok:
            await self.app(scope, receive, send)
            return
        body = json_error(
            401, "unauthorized", "a valid API key is required: Authorization: Bearer <key>"
        )
        await send_json(send, 401, body, [(b"www-authenticate", b"Bearer")])


class LoginRateLimitMiddleware:
    """At most ``per_minute`` failed UI logins per client address in any 60 s; more get 429.

    Watches ``POST {prefix}/login`` (Gradio's login route): a response of 400 or more counts
    as a failure; while an address has ``per_minute`` failures in the last minute, its login
    attempts are answered 429 with ``Retry-After`` without checking the password.
    """

    WINDOW_S = 60.0

    def __init__(
        self, app: ASGIApp, per_minute: int, prefix: str = "/ui", clock: Any = None
    ) -> None:
        import time

        self.app = app
        self.per_minute = per_minute
        self.paths = {f"{prefix}/login", f"{prefix}/login/"}
        self.clock = clock or time.monotonic
        self.failures: dict[str, list[float]] = {}

    def _recent(self, client: str) -> list[float]:
        now = self.clock()
        kept = [t for t in self.failures.get(client, []) if now - t < self.WINDOW_S]
        if kept:
            self.failures[client] = kept
        else:
            self.failures.pop(client, None)
        return kept

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or scope["path"] not in self.paths
        ):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        recent = self._recent(client)
        if len(recent) >= self.per_minute:
            wait = max(1, int(self.WINDOW_S - (self.clock() - recent[0])) + 1)
            body = json_error(
                429,
                "too_many_requests",
                f"too many failed logins from this address; try again in {wait} s "
                "(GMTS_LOGIN_ATTEMPTS_PER_MINUTE)",
            )
            await send_json(send, 429, body, [(b"retry-after", str(wait).encode())])
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.failures.setdefault(client, []).append(self.clock())
                if len(self.failures) > 10_000:  # bound the memory of many addresses
                    self.failures.pop(next(iter(self.failures)))
            await send(message)

        await self.app(scope, receive, watch)
