"""Run a benchmark script as a user does: ``python benchmarks/<name>.py --json ...`` in a
subprocess from the repository root, its whole stdout one JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.patience import PATIENCE_S, patient_env

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(name: str, *args: str, timeout_s: float = 3 * PATIENCE_S) -> dict[str, Any]:
    """The JSON report of ``benchmarks/<name>.py --json *args``; fails on a non-zero exit."""
    # the servers a benchmark starts read their time limits from the environment: a smoke run
    # checks that the benchmark runs and reports, on whatever machine, not that it is fast
    env = {**os.environ, "PYTHONPATH": str(REPO), **patient_env()}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), "--json", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert isinstance(report, dict) and report["benchmark"] == name
    return report
