"""Helpers shared by the end-to-end benchmarks: a live uvicorn server, statistics, output.

The benchmark scripts run as ``python benchmarks/<name>.py``, so this module is imported as a
sibling (``from _common import ...``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """A real uvicorn server of ``app`` on 127.0.0.1 (never another interface), in a thread."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def machine() -> dict[str, Any]:
    """What the figures were measured on (the load average matters on a shared machine)."""
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(load[0], 2),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def emit(report: dict[str, Any], as_json: bool, lines: Sequence[str]) -> None:
    """Print the report as one JSON object (``--json``) or as readable lines."""
    if as_json:
        print(json.dumps(report, default=float))
    else:
        print("\n".join(lines))
