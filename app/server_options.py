"""uvicorn's options for every server of the app (``gmts serve`` and :class:`LiveServer`).

- The request head is bounded: the h11 parser (never httptools, which has no limit) refuses a
  request line plus headers over ``GMTS_MAX_HEADER_BYTES``, and a connection that has not sent a
  whole head ``GMTS_HEADER_TIMEOUT_S`` after it opened or after its last response is closed
  (:class:`HeadTimeoutProtocol`; uvicorn itself has no header-read timeout).
- A request's body must arrive whole within ``GMTS_BODY_TIMEOUT_S`` of its head (a client
  that sends one byte every few seconds is cut off, its connection closed).
- Connections are capped: ``GMTS_MAX_CONNECTIONS_PER_CLIENT`` from one address and
  ``GMTS_MAX_CONNECTIONS`` in all; one over a cap is closed at once, before it is read, so a
  client holding many idle or slow sockets cannot take the server's file descriptors.
- uvicorn's own proxy-header handling is off: the app's RequestHeadMiddleware applies it to
  connections from ``GMTS_TRUSTED_PROXIES`` only and drops forwarded headers from any other.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from app.core.config import Settings


class HeadTimeoutProtocol(H11Protocol):
    """h11 with a deadline for each request head (``head_timeout_s``) and body
    (``body_timeout_s``), and caps on connections per client address and in all (set by a
    subclass, which also holds the counts: one event loop, so no lock)."""

    head_timeout_s = 10.0
    body_timeout_s = 30.0
    max_per_client = 64
    max_total = 1024
    open_by_client: dict[str, int] = {}
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _counted: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        counts = self.open_by_client
        if counts.get(client, 0) >= self.max_per_client or sum(counts.values()) >= self.max_total:
            transport.abort()  # over a cap: closed before a byte is read
            return
        counts[client] = counts.get(client, 0) + 1
        self._counted = client
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        if self._counted is not None:
            left = self.open_by_client.get(self._counted, 1) - 1
            if left > 0:
                self.open_by_client[self._counted] = left
            else:
                self.open_by_client.pop(self._counted, None)
            self._counted = None
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        waiting = cycle is not None and cycle.more_body and not cycle.response_complete
        if waiting and self._body_timer is None:
            self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_overdue, cycle)
        elif not waiting and self._body_timer is not None:  # the body is in
            self._body_timer.cancel()
            self._body_timer = None

    def _body_overdue(self, cycle: object) -> None:
        self._body_timer = None
        if self.cycle is cycle and getattr(cycle, "more_body", False):
            if not self.transport.is_closing():
                self.transport.close()  # the app's receive() sees the client gone

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_overdue)

    def _head_overdue(self) -> None:
        waiting = self.cycle is None or self.cycle.response_complete  # no request in progress
        if waiting and not self.transport.is_closing():
            self.transport.close()


def http_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn.Config options that bound request heads and leave proxies to the app."""
    protocol = type(
        "BoundedHeadProtocol",
        (HeadTimeoutProtocol,),
        {
            "head_timeout_s": settings.header_timeout_s,
            "body_timeout_s": settings.body_timeout_s,
            "max_per_client": settings.max_connections_per_client,
            "max_total": settings.max_connections,
            "open_by_client": {},  # this server's own counts
        },
    )
    return {
        "http": protocol,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "proxy_headers": False,
    }
