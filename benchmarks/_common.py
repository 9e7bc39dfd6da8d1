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
from collections.abc import Sequence
from typing import Any

from app.live_server import LiveServer, free_port

__all__ = ["LiveServer", "free_port", "emit", "machine", "median", "percentile"]


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
