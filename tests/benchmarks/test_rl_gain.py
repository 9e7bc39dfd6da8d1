"""The acceptance figure of live RL: 30 ``gmts`` steps at ratio 0.2, G=8, with the demo recipe,
raise the demo model's held-out accuracy by at least 15 points (the README's figure).

Runs ``benchmarks/rl_gain.py`` exactly as the README gives it (about 4.5 minutes on one CPU
thread), in a subprocess so its thread setting and seeds are its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.rl import DEMO_RECIPE

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained yet"
    ),
]


@pytest.mark.timeout(1800)
def test_thirty_gmts_steps_raise_heldout_accuracy_by_15_points() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "rl_gain.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=900,
        check=False,
    )
    report = json.loads(proc.stdout)
    assert (report["method"], report["ratio"], report["steps"], report["group_size"]) == (
        "gmts",
        0.2,
        30,
        8,
    )
    assert report["prompts_per_step"] == DEMO_RECIPE.prompts_per_step
    assert report["gain_points"] >= 15.0, report
    assert report["accuracy_after"] - report["accuracy_before"] >= 0.15
    assert proc.returncode == 0, proc.stderr[-3000:]
