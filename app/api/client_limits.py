"""Per-client limits outside the job queue: failed credentials and UI uploads.

The client is the connection's address as uvicorn reports it: ``X-Forwarded-For`` only counts
when the connection comes from one of ``GMTS_TRUSTED_PROXIES`` (``gmts serve`` passes them to
uvicorn; with none, the header is ignored), so rotating the header gives no fresh allowance.

- :class:`FailureWindow`: failures per client in a sliding minute; a client at the limit is
  locked until its oldest failure is a minute old. Other clients are never affected.
- :class:`KeyFailureLimitMiddleware`: a ``/v1`` client that sent ``per_minute`` wrong keys gets
  429 + ``Retry-After`` for any other wrong key; a request with the right key always passes.
- :class:`LoginRateLimitMiddleware`: the same for the UI's login form.
- :class:`UploadLimitMiddleware`: the UI's file uploads (``{prefix}/gradio_api/upload``): at
  most ``per_window`` per client in ``window_s`` (429 beyond) and ``max_bytes`` each (413).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.asgi import content_length, json_error, read_body, send_json

MAX_TRACKED_CLIENTS = 10_000  # bound the memory of many addresses


def client_address(scope: Scope) -> str:
    return str((scope.get("client") or ("?", 0))[0])


class FailureWindow:
    """Events per client within the last ``window_s`` seconds, for at most ``limit`` each."""

    def __init__(
        self, limit: int, window_s: float = 60.0, clock: Callable[[], float] | None = None
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clock = clock or time.monotonic
        self.events: dict[str, list[float]] = {}

    def _recent(self, client: str) -> list[float]:
        now = self.clock()
        kept = [t for t in self.events.get(client, []) if now - t < self.window_s]
        if kept:
            self.events[client] = kept
        else:
            self.events.pop(client, None)
        return kept

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again (None: it may now)."""
        recent = self._recent(client)
        if len(recent) < self.limit:
            return None
        return max(1, int(self.window_s - (self.clock() - recent[0])) + 1)

    def record(self, client: str) -> None:
        self.events.setdefault(client, []).append(self.clock())
        if len(self.events) > MAX_TRACKED_CLIENTS:
            self.events.pop(next(iter(self.events)))


async def _too_many(send: Send, wait: int, message: str) -> None:
    body = json_error(429, "too_many_requests", f"{message}; try again in {wait} s")
    await send_json(send, 429, body, [(b"retry-after", str(wait).encode())])


class _FailureLimit:
    """Answers 429 for a locked client; counts the app's responses that ``failed(status)``."""

    what = "requests"
    setting = ""

    def __init__(self, app: ASGIApp, per_minute: int, clock: Any = None) -> None:
        self.app = app
        self.window = FailureWindow(per_minute, 60.0, clock)

    def watches(self, scope: Scope) -> bool:
        raise NotImplementedError

    def failed(self, status: int) -> bool:
        raise NotImplementedError

    def exempt(self, scope: Scope) -> bool:
        """Whether a locked client's request passes anyway."""
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.watches(scope):
            await self.app(scope, receive, send)
            return
        client = client_address(scope)
        wait = self.window.retry_after(client)
        if wait is not None and not self.exempt(scope):
            message = f"too many {self.what} from this address ({self.setting})"
            await _too_many(send, wait, message)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and self.failed(message["status"]):
                self.window.record(client)
            await send(message)

        await self.app(scope, receive, watch)


class KeyFailureLimitMiddleware(_FailureLimit):
    """At most ``per_minute`` wrong or missing ``/v1`` keys per client in any 60 s (sits
    outside :class:`~app.api.middleware.ApiKeyMiddleware` and counts its 401s)."""

    what = "requests with a wrong API key"
    setting = "GMTS_KEY_FAILURES_PER_MINUTE"

    def __init__(
        self,
        app: ASGIApp,
        per_minute: int,
        prefix: str = "/v1",
        clock: Any = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__(app, per_minute, clock)
        self.prefix = prefix
        self.expected = api_key.encode() if api_key is not None else None

    def exempt(self, scope: Scope) -> bool:
        # the lock is for wrong keys: whoever shares a locked address with a guesser (a NAT, a
        # proxy) and holds the right key still gets in (compared in constant time)
        if self.expected is None:
            return False
        auth = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
        scheme, _, given = auth.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.expected)

    def watches(self, scope: Scope) -> bool:
        path = scope.get("path", "")
        return scope.get("method") != "OPTIONS" and (
            path == self.prefix or path.startswith(self.prefix + "/")
        )

    def failed(self, status: int) -> bool:
        return status == 401


class LoginRateLimitMiddleware(_FailureLimit):
    """At most ``per_minute`` failed UI logins per client in any 60 s; more get 429.

    Watches ``POST {prefix}/login`` (Gradio's login route): a response of 400 or more counts
    as a failure. A locked client is answered 429 without its password being checked; any other
    client (another address) logs in as usual.
    """

    what = "failed logins"
    setting = "GMTS_LOGIN_ATTEMPTS_PER_MINUTE"

    def __init__(
        self, app: ASGIApp, per_minute: int, prefix: str = "/ui", clock: Any = None
    ) -> None:
        super().__init__(app, per_minute, clock)
        self.paths = {f"{prefix}/login", f"{prefix}/login/"}

    def watches(self, scope: Scope) -> bool:
        return scope.get("method") == "POST" and scope["path"] in self.paths

    def failed(self, status: int) -> bool:
        return status >= 400


class UploadLimitMiddleware:
    """The UI's uploads: ``max_bytes`` per request (413), ``per_window`` per client (429)."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        per_window: int,
        window_s: float,
        prefix: str = "/ui",
        clock: Any = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.window = FailureWindow(per_window, window_s, clock)
        self.paths = {f"{prefix}/gradio_api/upload", f"{prefix}/gradio_api/upload/"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        declared = content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(send)
            return
        client = client_address(scope)
        wait = self.window.retry_after(client)
        if wait is not None:
            message = (
                f"at most {self.window.limit} uploads per {self.window.window_s:g} s from one "
                "address (GMTS_UI_UPLOADS_PER_CLIENT, GMTS_UI_UPLOAD_TTL_S)"
            )
            await _too_many(send, wait, message)
            return
        body, _ = await read_body(receive, self.max_bytes)
        if body is None:
            await self._too_large(send)
            return
        self.window.record(client)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        message = f"an upload may hold at most {self.max_bytes} bytes (GMTS_UI_UPLOAD_MAX_BYTES)"
        body = json_error(413, "payload_too_large", message)
        await send_json(send, 413, body, [(b"connection", b"close")])
