"""Run an app on a real uvicorn server on 127.0.0.1 in a background thread.

For tests, benchmarks and scripts that need real HTTP (never another interface than loopback),
with the Chromium that browser checks drive: Debian's, with flags that keep it offline.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from app.core.config import Settings
from app.server_options import http_options

CHROMIUM_PATH = "/usr/bin/chromium"  # Debian's chromium package; never a downloaded browser
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """``with LiveServer(app) as server: ... server.url ...``: uvicorn serving ``app``."""

    def __init__(self, app: Any, port: int | None = None, start_timeout_s: float = 300) -> None:
        self.app = app
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        settings = getattr(getattr(app, "state", None), "settings", None)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            # bounded request heads, proxies left to the app: as `gmts serve` does
            **http_options(settings if settings is not None else Settings()),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=self.start_timeout_s)
