"""Acceptance: 30 live GRPO steps of `gmts` at ratio 0.2, G = 8 teach the bundled demo model.

Runs ``benchmarks/rl_gain.py`` with its defaults (seeded) and checks the held-out accuracy gain.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gmts_core.demo import DEMO_MODEL_DIR

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(
    not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained"
)
def test_thirty_gmts_steps_raise_heldout_accuracy_by_15_points() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "rl_gain.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
        check=False,
    )
    report = json.loads(run.stdout)
    assert report["method"] == "gmts" and report["steps"] == 30 and report["group_size"] == 8
    assert report["gain_points"] >= 15.0, report
    assert run.returncode == 0
