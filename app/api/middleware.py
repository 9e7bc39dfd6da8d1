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
import logging
import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.asgi import header, json_error, send_json

logger = logging.getLogger(__name__)

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


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = header(scope, b"x-request-id")
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
        auth = header(scope, b"authorization") or ""
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


class OptionsMiddleware:
    """``OPTIONS`` on an API path answers 204 with ``Allow`` listing every method of every route
    at that path (Starlette's own 405 lists only the first route's: a session's
    ``GET`` without its ``DELETE``). CORS preflights are answered before this, by CORS."""

    def __init__(self, app: ASGIApp, skip_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self.skip_prefixes = skip_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "OPTIONS"
            or scope.get("path", "").startswith(self.skip_prefixes)
        ):
            await self.app(scope, receive, send)
            return
        methods = _methods_at(scope)
        if not methods:
            await self.app(scope, receive, send)
            return
        allow = ", ".join(sorted(methods | {"OPTIONS"}))
        await send(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [(b"allow", allow.encode())],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _methods_at(scope: Scope) -> set[str]:
    """The methods the app's OpenAPI paths offer at the request's path (templates such as
    ``/v1/sessions/{session_id}`` match any one segment)."""
    app = scope.get("app")
    openapi = getattr(app, "openapi", None)
    if openapi is None:
        return set()
    path = scope.get("path", "")
    methods: set[str] = set()
    for template, operations in openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods |= {m.upper() for m in operations if m.lower() in _HTTP_METHODS}
    return methods


_HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head"}
