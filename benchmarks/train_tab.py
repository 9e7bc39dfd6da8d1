"""Do the Train tab's default settings teach the demo model? Its own loop, timed by part.

Drives exactly what the tab runs when a person presses "Run steps" with the defaults
(``app.ui.tabs.train.view.TrainForm()``: 30 GRPO steps of gmts at ratio 0.2, 32 prompts x G = 8
a step, AdamW lr 1.5e-4 with 5 warm-up steps, 1 update per batch, held-out accuracy on 200
problems at the start, every 5 steps and at the end) through the local backend, for each
``--seeds`` seed. It reports the held-out accuracy gain and where the wall time goes: the steps
themselves (the backend's step calls), the tab's bookkeeping (session reads), building the
figures and tables after every step, and the evaluations, and the size of the last batch's
HTML (all prompts vs the few shown).

With ``--browser`` each seed also runs in real Chromium (Debian's ``/usr/bin/chromium``)
against a live server with the bundled model, as a class would: the Train tab at its defaults,
one click on "Run steps", timed from the click until the last held-out point is drawn; the
report gives that browser wall time, the held-out accuracy points the chart shows, and the
browser path's time over the loop's (same seed, same settings, run just before).

    .venv/bin/python benchmarks/train_tab.py [--seeds 0 1] [--steps 30] [--threads 2] [--json]
    .venv/bin/python benchmarks/train_tab.py --browser --seeds 0 1 2 --json
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _common import LiveServer, emit, machine, median, ui_tab

from app.core.config import Settings
from app.main import create_app
from app.services.catalog import CompareConfig
from app.services.container import build_services
from app.services.train_gain import evaluation_gain
from app.ui.local_backend import LocalBackend
from app.ui.tabs.train import view as train
from app.ui.tabs.train.changes import render_batch_changes


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--steps", type=int, default=train.TrainForm.steps)
    p.add_argument("--method", default=train.TrainForm.method)
    p.add_argument("--threads", type=int, default=2)
    # smaller than the tab's defaults only for the smoke test
    p.add_argument("--prompts-per-step", type=int, default=train.TrainForm.prompts_per_step)
    p.add_argument("--group-size", type=int, default=train.TrainForm.group_size)
    p.add_argument("--max-new-tokens", type=int, default=train.TrainForm.max_new_tokens)
    p.add_argument("--eval-problems", type=int, default=train.TrainForm.eval_problems)
    p.add_argument("--min-gain", type=float, default=0.0, help="exit 1 at or below (points)")
    p.add_argument("--browser", action="store_true", help="also run it in real Chromium")
    p.add_argument(
        "--vs-compare",
        action="store_true",
        help="also run the same recipe through the compare core (gmts compare's path) and "
        "report its seconds per step against the tab's",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args()


class Timed:
    """Wraps backend methods and sums the seconds spent in each."""

    def __init__(self, backend: LocalBackend) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        for name in ("create_session", "step_session", "get_session", "evaluate_session"):
            setattr(backend, name, self._wrap(name, getattr(backend, name)))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return call


def tab_form(args: argparse.Namespace, seed: int = 0) -> train.TrainForm:
    """The tab's form at its defaults, with the command line's overrides."""
    return dataclasses.replace(
        train.TrainForm(), seed=seed, steps=args.steps, method=args.method,
        prompts_per_step=args.prompts_per_step, group_size=args.group_size,
        max_new_tokens=args.max_new_tokens, eval_problems=args.eval_problems,
    )  # fmt: skip


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings()
    services = build_services(settings)
    backend = LocalBackend(services)
    timed = Timed(backend)
    form = tab_form(args, seed)
    start = time.perf_counter()
    view = None
    sent: list[tuple[int, int]] = []  # per update: (bytes of all values, bytes of batch HTML)
    for view in train.run_steps(backend, None, form):
        t = time.perf_counter()
        values = view.values()  # what the tab sends to the browser after every step
        timed.seconds["figures_and_tables"] += time.perf_counter() - t
        sent.append((sum(map(_payload_bytes, values)), _payload_bytes(values[BATCH_VALUE])))
    wall = time.perf_counter() - start
    assert view is not None and view.info is not None
    evals = view.info["evaluations"]
    before, after = evals[0]["accuracy"], evals[-1]["accuracy"]
    return {
        "seed": seed,
        "accuracy_points": [[e["step"], round(e["accuracy"], 4)] for e in evals],
        "accuracy_before": round(before, 4),
        "accuracy_after": round(after, 4),
        "gain_points": round(100 * (after - before), 2),
        "gain_interval_points": _interval(evals),
        "train_rewards": [round(h["reward_mean"], 3) for h in view.info["history"]],
        "seconds": round(wall, 1),
        "seconds_by_part": {k: round(v, 2) for k, v in timed.seconds.items()},
        "warnings": train.train_runs.warnings(form.learning_rate, view.info),
        # the last batch's HTML: all of it (what the tab sent after every step before), and
        # what it sends now (the first prompts, once per run)
        "batch_html_bytes_all": len(render_batch_changes(view.last_batch, 10**6).encode()),
        "batch_html_bytes_shown": len(render_batch_changes(view.last_batch).encode()),
        # what the tab's updates carry, measured: the median update mid-run (all values, and
        # its batch HTML), and the batch HTML summed over the whole run
        "update_bytes_mid_run_median": median([a for a, _ in sent[:-1]]) if len(sent) > 1 else 0,
        "batch_html_bytes_mid_run_median": median([b for _, b in sent[:-1]])
        if len(sent) > 1
        else 0,
        "batch_html_bytes_run_total": sum(b for _, b in sent),
        "updates": len(sent),
    }


BATCH_VALUE = 6  # TrainView.values(): state, status, three figures, table, batch HTML, runs


def _payload_bytes(value: Any) -> int:
    """Bytes of one output value as sent (a figure as its JSON; a skipped one sends nothing)."""
    if value is train.SKIP or value is None:
        return 0
    if hasattr(value, "to_json"):
        return len(value.to_json().encode())
    if isinstance(value, str):
        return len(value.encode())
    return len(json.dumps(value, default=str).encode())


def compare_per_step(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """The tab's recipe through the compare core (what `gmts compare` and the Compare tab run):
    one run of the tab's method from ``seed``, one held-out problem at the end only (so the
    run's time is its steps); seconds per step."""
    form = tab_form(args, seed)
    services = build_services(Settings())
    rl = dataclasses.replace(
        train.TRAIN_RECIPE,
        prompts_per_step=form.prompts_per_step,
        group_size=form.group_size,
        max_new_tokens=form.max_new_tokens,
    )
    config = CompareConfig(
        methods=(form.method,), ratio=form.ratio, steps=form.steps, seeds=1, seed_offset=seed,
        eval_every=form.steps, eval_problems=1, rl=rl,
    )  # fmt: skip
    result = services.compare.run(None, config)
    (run,) = result.runs
    # the same run in the job line, as the Compare tab (and the Train tab's steps) run: a job
    # thread at the job threads' lower CPU priority (app.services.jobs.JOB_THREAD_NICE), which
    # on a loaded machine is most of the difference between the tab and `gmts compare`
    (line_run,) = LocalBackend(services).compare(None, config)["runs"]
    line_seconds = float(line_run["seconds"])
    return {
        "compare_seconds_per_step": round(run.seconds / form.steps, 3),
        "compare_job_line_seconds_per_step": round(line_seconds / form.steps, 3),
    }


def _interval(evals: list[Any]) -> list[float] | None:
    """The gain's 95% paired interval in points, as the tab's label gives it."""
    g = evaluation_gain(evals)
    return None if g is None else [round(100 * g.low, 2), round(100 * g.high, 2)]


# the held-out accuracy points the Train tab's reward chart draws (its first trace)
ACCURACY_POINTS_JS = """() => {
    const d = document.querySelector('#train-reward-plot .js-plotly-plot');
    if (!d || !d.data || !d.data[0]) return [];
    return d.data[0].x.map((x, i) => [x, d.data[0].y[i]]);
}"""
# the chart's gain label (its one annotation)
GAIN_LABEL_JS = """() => {
    const d = document.querySelector('#train-reward-plot .js-plotly-plot');
    const a = d && d.layout && d.layout.annotations;
    return a && a.length ? a[0].text.replace('<br>', ' ') : null;
}"""
BROWSER_TIMEOUT_MS = 3_600_000


def set_number(page: Any, elem_id: str, value: float) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def browser_run(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """The preset in real Chromium: Train tab, one click on "Run steps", until the last
    held-out point is on the chart."""
    form = tab_form(args, seed)
    app = create_app(Settings(ui_enabled=True, torch_threads=args.threads))
    with LiveServer(app) as server, ui_tab(server.url, "Train", BROWSER_TIMEOUT_MS) as page:
        defaults = train.TrainForm()
        overrides = {
            "train-steps": (form.steps, defaults.steps),
            "train-g": (form.group_size, defaults.group_size),
            "train-prompts": (form.prompts_per_step, defaults.prompts_per_step),
            "train-max-new": (form.max_new_tokens, defaults.max_new_tokens),
            "train-eval": (form.eval_problems, defaults.eval_problems),
            "train-seed": (seed, defaults.seed),
        }
        for elem_id, (value, default) in overrides.items():
            if value != default:
                set_number(page, elem_id, value)
        if form.method != defaults.method:
            raise SystemExit("--browser runs the tab's own method only (leave --method out)")
        start = time.perf_counter()
        page.click("#train-run-btn")
        page.wait_for_function(  # the end-of-run evaluation is drawn
            "(n) => { const d = document.querySelector('#train-reward-plot .js-plotly-plot');"
            " return !!(d && d.data && d.data[0] && d.data[0].x.includes(n)); }",
            arg=form.steps,
            polling=250,
        )
        page.wait_for_selector(f"#train-session:has-text('steps done {form.steps}')")
        wall = time.perf_counter() - start
        points = page.evaluate(ACCURACY_POINTS_JS)
        label = page.evaluate(GAIN_LABEL_JS)
    return {
        "seed": seed,
        "browser_seconds": round(wall, 1),
        "accuracy_points": [[int(x), round(float(y), 4)] for x, y in points],
        "gain_points": round(100 * (points[-1][1] - points[0][1]), 2),
        "gain_label": label,
    }


def main() -> int:
    args = parse_args()
    torch.set_num_threads(args.threads)
    form = tab_form(args)
    runs, browser_runs = [], []
    if args.vs_compare:  # one-off costs (kernel builds, probes) paid before either is timed
        compare_per_step(args.seeds[0], argparse.Namespace(**{**vars(args), "steps": 1}))
    for seed in args.seeds:  # the loop, then the browser, seed by seed: both see similar load
        runs.append(run_seed(seed, args))
        if args.vs_compare:  # right after the loop: similar load for both
            r = runs[-1]
            r.update(compare_per_step(seed, args))
            r["tab_step_seconds_per_step"] = round(
                r["seconds_by_part"]["step_session"] / args.steps, 3
            )
            r["tab_over_compare_per_step"] = round(
                r["tab_step_seconds_per_step"] / r["compare_seconds_per_step"], 2
            )
            r["tab_over_compare_job_line_per_step"] = round(
                r["tab_step_seconds_per_step"] / r["compare_job_line_seconds_per_step"], 2
            )
        if args.browser:
            seen = browser_run(seed, args)
            seen["browser_over_loop"] = round(seen["browser_seconds"] / runs[-1]["seconds"], 2)
            browser_runs.append(seen)
    gains = [r["gain_points"] for r in runs]
    report = {
        "benchmark": "train_tab",
        "settings": {**form.knobs(), "steps": args.steps, "eval_problems": form.eval_problems},
        "threads": args.threads,
        "runs": runs,
        "gain_points_median": median(gains),
        "seconds_median": median([r["seconds"] for r in runs]),
        "browser": browser_runs,
        "machine": machine(),
    }
    lines = [
        f"Train tab defaults: {args.steps} steps of {args.method}, {form.prompts_per_step} "
        f"prompts x G={form.group_size}, lr {form.learning_rate:g}, {form.inner_steps} updates "
        f"per batch, {form.warmup_steps} warm-up steps; {args.threads} threads",
        *(
            f"  seed {r['seed']}: held-out accuracy {r['accuracy_before']:.3f} -> "
            f"{r['accuracy_after']:.3f} ({r['gain_points']:+.1f} points, 95% paired "
            f"{r['gain_interval_points']}) in {r['seconds']} s "
            f"[{', '.join(f'{k} {v:.1f} s' for k, v in r['seconds_by_part'].items())}; "
            f"last batch HTML {r['batch_html_bytes_all'] / 1e3:.0f} kB all, "
            f"{r['batch_html_bytes_shown'] / 1e3:.0f} kB shown; per update mid-run "
            f"{r['update_bytes_mid_run_median'] / 1e3:.0f} kB, of it batch HTML "
            f"{r['batch_html_bytes_mid_run_median'] / 1e3:.0f} kB; batch HTML over the run "
            f"{r['batch_html_bytes_run_total'] / 1e3:.0f} kB in {r['updates']} updates]"
            for r in runs
        ),
        *(
            f"  seed {r['seed']}: a step in the tab {r['tab_step_seconds_per_step']} s, through "
            f"the compare core {r['compare_seconds_per_step']} s: "
            f"{r['tab_over_compare_per_step']}x (goal <= 1.3x); through the job line, as the "
            f"tab runs, {r['compare_job_line_seconds_per_step']} s: "
            f"{r['tab_over_compare_job_line_per_step']}x"
            for r in runs
            if "compare_seconds_per_step" in r
        ),
        f"  median gain {report['gain_points_median']:+.1f} points, median time "
        f"{report['seconds_median']:.0f} s",
        *(
            f"  browser, seed {b['seed']}: held-out accuracy "
            + " -> ".join(f"{y:.3f}@{x}" for x, y in b["accuracy_points"])
            + f" ({b['gain_points']:+.1f} points) in {b['browser_seconds']} s from the click "
            f"({b['browser_over_loop']}x the loop)"
            for b in browser_runs
        ),
    ]
    emit(report, args.json, lines)
    return 0 if all(g > args.min_gain for g in gains) else 1


if __name__ == "__main__":
    sys.exit(main())
