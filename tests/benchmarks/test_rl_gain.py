"""The acceptance figure of live RL: 30 ``gmts`` steps at ratio 0.2, G=8, with the demo recipe,
raise the demo model's held-out accuracy by at least 15 points (the figure of docs/benchmarks.md).

Runs ``benchmarks/rl_gain.py`` as docs/benchmarks.md gives it (about 4.5 minutes on one CPU thread),
in a subprocess so its thread setting and seeds are its own; the script itself exits 1 when
the gain is below 15 points.
"""

from __future__ import annotations

import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.grpo.step import DEMO_RECIPE
from tests.benchmarks.runner import run_benchmark

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained yet"
    ),
]


@pytest.mark.timeout(1800)
def test_thirty_gmts_steps_raise_heldout_accuracy_by_15_points() -> None:
    report = run_benchmark("rl_gain", timeout_s=1500)
    assert (report["method"], report["ratio"], report["steps"], report["group_size"]) == (
        "gmts",
        0.2,
        30,
        8,
    )
    assert report["prompts_per_step"] == DEMO_RECIPE.prompts_per_step
    assert report["gain_points"] >= 15.0, report
    assert report["accuracy_after"] - report["accuracy_before"] >= 0.15
