"""The Compare tab's preset in real Chromium: one click on "Run compare", timed to the table.

Starts the app (API + UI, the bundled demo model, the default limits) on a live uvicorn server
on 127.0.0.1 and drives Debian's Chromium (``/usr/bin/chromium``, offline flags): the Compare
tab at its preset (``app.ui.tabs.compare.view.UI_COMPARE``: entropy and gmts, 2 paired seeds x
10 steps of the classroom recipe, 200 held-out problems), one click, timed until the final
table and its downloads are shown. Reports that wall time (goal: 90 s on a quiet 2-core
machine), the form's values as the page showed them, the conclusion sentence and the table.

    .venv/bin/python benchmarks/compare_tab.py [--threads 2] [--json]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import LiveServer, emit, machine, ui_tab

from app.core.config import Settings
from app.main import create_app
from app.ui.tabs.compare.view import UI_COMPARE

TIMEOUT_MS = 900_000
GOAL_S = 90.0
FORM = ("compare-steps", "compare-seeds", "compare-prompts", "compare-g", "compare-eval")


def run(threads: int) -> dict[str, Any]:
    app = create_app(Settings(ui_enabled=True, torch_threads=threads))
    with LiveServer(app) as server, ui_tab(server.url, "Compare", TIMEOUT_MS) as page:
        page.wait_for_selector("#compare-run-btn")
        form = {k: page.locator(f"#{k} input[type=number]").input_value() for k in FORM}
        start = time.perf_counter()
        page.click("#compare-run-btn")
        page.wait_for_selector("#compare-json", state="visible")
        wall = time.perf_counter() - start
        summary = page.locator("#compare-summary").inner_text()
        table = page.locator("#compare-table [role=grid]").inner_text()
    return {
        "browser_seconds": round(wall, 1),
        "goal_seconds": GOAL_S,
        "form": form,
        "conclusion": summary.split("\n")[0],
        "table": table,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    result = run(args.threads)
    report = {
        "benchmark": "compare_tab",
        "preset": {
            "methods": list(UI_COMPARE.methods),
            "steps": UI_COMPARE.steps,
            "seeds": UI_COMPARE.seeds,
            "prompts_per_step": UI_COMPARE.rl.prompts_per_step,
            "eval_problems": UI_COMPARE.eval_problems,
        },
        **result,
        "machine": machine(),
    }
    emit(
        report,
        args.json,
        [
            f"Compare preset: {result['browser_seconds']} s from the click to the table "
            f"(goal {GOAL_S:g} s); form {result['form']}",
            result["conclusion"],
        ],
    )


if __name__ == "__main__":
    main()
