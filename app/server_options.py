"""uvicorn's options for every server of the app (``gmts serve`` and :class:`LiveServer`).

- The request head is bounded: the h11 parser (never httptools, which has no limit) refuses a
  request line plus headers over ``GMTS_MAX_HEADER_BYTES``, and a connection that has not sent a
  whole head ``GMTS_HEADER_TIMEOUT_S`` after it opened or after its last response is closed
  (:class:`HeadTimeoutProtocol`; uvicorn itself has no header-read timeout).
- uvicorn's own proxy-header handling is off: the app's RequestHeadMiddleware applies it to
  connections from ``GMTS_TRUSTED_PROXIES`` only and drops forwarded headers from any other.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from app.core.config import Settings


class HeadTimeoutProtocol(H11Protocol):
    """h11 with a deadline for each request head (``head_timeout_s``, set by a subclass)."""

    head_timeout_s = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)

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
        "BoundedHeadProtocol", (HeadTimeoutProtocol,), {"head_timeout_s": settings.header_timeout_s}
    )
    return {
        "http": protocol,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "proxy_headers": False,
    }
