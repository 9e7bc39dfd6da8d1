"""Helpers shared by the end-to-end benchmarks: a live uvicorn server, statistics, output.

The benchmark scripts run as ``python benchmarks/<name>.py``, so this module is imported as a
sibling (``from _common import ...``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from app.live_server import CHROMIUM_ARGS, CHROMIUM_PATH, LiveServer, free_port

__all__ = ["LiveServer", "free_port", "emit", "machine", "median", "percentile", "ui_tab"]


@contextmanager
def ui_tab(
    url: str, tab: str, timeout_ms: int, width: int = 1366, height: int = 900
) -> Iterator[Any]:
    """A page of Debian's Chromium (offline flags) on ``url``'s UI with ``tab`` open."""
    from playwright.sync_api import sync_playwright  # the dev extra's; only for browser runs

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM_PATH, args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_context(viewport={"width": width, "height": height}).new_page()
            page.set_default_timeout(timeout_ms)
            page.goto(url + "/ui/", wait_until="load")
            page.wait_for_selector("#analyze-btn")
            page.get_by_role("tab", name=tab).click()
            yield page
        finally:
            browser.close()


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
