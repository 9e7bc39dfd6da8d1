"""Which requests the server believes: its host names, its proxies, the size of a request head.

:class:`RequestHeadMiddleware` (outermost) answers before anything else reads a header:

- more than ``max_headers`` headers: 431;
- ``X-Forwarded-*`` and ``Forwarded`` headers are removed unless the connection comes from one
  of ``GMTS_TRUSTED_PROXIES``; from one, uvicorn's own proxy-header handling sets the client
  address and scheme (so a client can never make the UI reflect a host of its choosing);
- a ``Host`` (or a trusted proxy's ``X-Forwarded-Host``) not in ``GMTS_ALLOWED_HOSTS``: 400.

The size of the head and the time to send it are bounded in the server itself
(app.cli.serve.http_options).
"""

from __future__ import annotations

import ipaddress
from typing import Any, cast

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app.api.asgi import json_error, send_json

FORWARDED = (b"forwarded", b"x-forwarded-")


def host_name(value: str) -> str:
    """``value`` of a Host header without its port (``[::1]:8000`` -> ``::1``), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def is_trusted(peer: str, trusted: list[str]) -> bool:
    """Whether the connection's address ``peer`` is one of ``trusted`` (addresses, networks)."""
    for entry in trusted:
        if entry == "*" or entry == peer:
            return True
        try:
            if ipaddress.ip_address(peer) in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


class RequestHeadMiddleware:
    def __init__(
        self, app: ASGIApp, allowed_hosts: list[str], trusted_proxies: list[str], max_headers: int
    ) -> None:
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.allowed = {host_name(h) for h in allowed_hosts}
        self.trusted = list(trusted_proxies)
        self.max_headers = max_headers
        # uvicorn types its ASGI callables more narrowly than Starlette's ASGIApp
        self.proxied: Any = ProxyHeadersMiddleware(cast(Any, app), trusted_hosts=self.trusted or "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = list(scope.get("headers", []))
        if len(headers) > self.max_headers:
            message = f"more than {self.max_headers} headers (GMTS_MAX_HEADERS)"
            await self._refuse(send, 431, "request_header_fields_too_large", message)
            return
        peer = str((scope.get("client") or ("", 0))[0])
        trusted = bool(self.trusted) and is_trusted(peer, self.trusted)
        if not trusted:
            headers = [(k, v) for k, v in headers if not k.lower().startswith(FORWARDED)]
            scope = {**scope, "headers": headers}
        for name, value in headers:
            if name.lower() in (b"host", b"x-forwarded-host") and not self._allowed(value):
                shown = value.decode("latin-1")[:100]
                await self._refuse(send, 400, "bad_host",
                                   f"host {shown!r} is not one this server answers to "
                                   "(GMTS_ALLOWED_HOSTS)")  # fmt: skip
                return
        await (self.proxied if trusted else self.app)(scope, receive, send)

    def _allowed(self, value: bytes) -> bool:
        if self.any_host:
            return True
        names = value.decode("latin-1").split(",")  # a proxy chain: every hop's host
        return all(host_name(n) in self.allowed for n in names)

    async def _refuse(self, send: Send, status: int, code: str, message: str) -> None:
        await send_json(
            send, status, json_error(status, code, message), [(b"connection", b"close")]
        )
