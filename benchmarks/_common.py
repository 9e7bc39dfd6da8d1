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
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.live_server import CHROMIUM_ARGS, CHROMIUM_PATH, LiveServer, free_port

__all__ = [
    "LiveServer",
    "ServerClock",
    "emit",
    "free_port",
    "machine",
    "median",
    "percentile",
    "ui_tab",
]


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
        "cpu_model": cpu_model(),  # machines of one kind differ: 1.75x between two of them
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(load[0], 2),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def cpu_model() -> str:
    """The processor as Linux names it, with its family and model numbers and its widest
    vector units ("AMD EPYC (family 25, model 17; avx2 avx512f)"); '' where unknown."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    first = text.split("\n\n", 1)[0]
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in first.splitlines())
    )
    flags = set(fields.get("flags", "").split())
    simd = " ".join(f for f in ("avx2", "avx512f", "amx_tile") if f in flags)
    name = fields.get("model name", "")
    numbers = f"family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}"
    return f"{name} ({numbers}; {simd or 'no avx2'})" if name else ""


def emit(report: dict[str, Any], as_json: bool, lines: Sequence[str]) -> None:
    """Print the report as one JSON object (``--json``) or as readable lines."""
    if as_json:
        print(json.dumps(report, default=float))
    else:
        print("\n".join(lines))


def gradio_app(app: Any) -> Any:
    """The Gradio app mounted at /ui (to read its queue's own timings)."""
    for route in app.routes:
        if getattr(route, "path", None) == "/ui" and hasattr(route, "app"):
            return route.app
    raise RuntimeError("no Gradio app mounted at /ui")


class ServerClock:
    """Gradio's own process time of the event handlers of one name (``run_single``: Explore's
    Analyze, and the real-model example's run after it fills the form)."""

    def __init__(self, app: Any, fn_name: str = "run_single") -> None:
        blocks = gradio_app(app).get_blocks()
        self.fns = [f for f in blocks.fns.values() if getattr(f, "name", "") == fn_name]
        if not self.fns:
            raise RuntimeError(f"no event handler named {fn_name!r}")
        self.queue = blocks._queue

    def read(self) -> tuple[float, int]:
        """(total process seconds, number of runs) so far, over the handlers of the name."""
        times = [self.queue.process_time_per_fn.get(fn) for fn in self.fns]
        done = [t for t in times if t is not None]
        return sum(t.process_time for t in done), sum(t.count for t in done)

    def wait_next(self, before: tuple[float, int], timeout_s: float = 30) -> float:
        """Seconds of the run that follows ``before`` (the queue records it as it finishes)."""
        deadline = time.monotonic() + timeout_s
        while (now := self.read())[1] <= before[1]:
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not record the Analyze run")
            time.sleep(0.01)
        return (now[0] - before[0]) / (now[1] - before[1])
