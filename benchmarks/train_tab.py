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

With ``--vs-compare`` each seed then runs the tab's steps and the compare core's steps (what
``gmts compare`` runs) of the same recipe in one run, interleaved step by step in one process, and
reports each one's wall and CPU seconds per step and their ratios (the goal: the tab at most 1.3x
the compare core per step).

    .venv/bin/python benchmarks/train_tab.py [--seeds 0 1] [--steps 30] [--threads 2] [--json]
    .venv/bin/python benchmarks/train_tab.py --browser --seeds 0 1 2 --json
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
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
        help="also run the tab's steps and the compare core's (gmts compare's path) of the same "
        "recipe interleaved in one run, and report wall and CPU seconds per step of each",
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


def _compare_config(form: train.TrainForm, seed: int, steps: int) -> CompareConfig:
    """The tab's recipe as a comparison of one run (what `gmts compare` and the Compare tab
    train): the tab's method from ``seed``, no evaluation but the one at the end."""
    rl = dataclasses.replace(
        train.TRAIN_RECIPE,
        prompts_per_step=form.prompts_per_step,
        group_size=form.group_size,
        max_new_tokens=form.max_new_tokens,
    )
    return CompareConfig(
        methods=(form.method,), ratio=form.ratio, steps=steps, seeds=1, seed_offset=seed,
        eval_every=steps, eval_problems=1, rl=rl,
    )  # fmt: skip


def _clock() -> tuple[float, float]:
    """(wall, CPU seconds of this whole process: every thread, torch's included)."""
    return time.perf_counter(), time.process_time()


def tab_vs_compare(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """The tab's steps and the compare core's steps of the same recipe in ONE run, interleaved:
    tab step 1, compare step 1, tab step 2, compare step 2, ... in one process, so a change of
    load falls on both alike. Each step is timed in wall seconds and in the process's CPU
    seconds (nothing else runs in the process meanwhile, so the CPU is that step's, whatever
    the load). The tab's steps run as the tab runs them (its loop, the job queue, the session
    service); the compare core's as `gmts compare` runs them (the main thread)."""
    services = build_services(Settings())
    backend = LocalBackend(services)
    form = tab_form(args, seed)
    tab: list[tuple[float, float]] = []
    core: list[tuple[float, float]] = []
    step_session = backend.step_session

    def timed_step(*a: Any, **k: Any) -> Any:
        w, c = _clock()
        try:
            return step_session(*a, **k)
        finally:
            w2, c2 = _clock()
            tab.append((w2 - w, c2 - c))

    backend.step_session = timed_step  # type: ignore[method-assign]
    steps = services.compare.run_steps(
        None, _compare_config(form, seed, form.steps), form.method, seed
    )
    for _ in train.run_steps(backend, None, form):
        while len(core) < len(tab):  # the compare core's step right after the tab's
            w, c = _clock()
            next(steps)
            w2, c2 = _clock()
            core.append((w2 - w, c2 - c))
    pairs = list(zip(tab, core, strict=True))
    later = pairs[1:] or pairs  # the first pair carries each path's one-off costs
    med = {
        key: median([p[side][i] for p in later])
        for key, side, i in (
            ("tab_wall", 0, 0),
            ("tab_cpu", 0, 1),
            ("core_wall", 1, 0),
            ("core_cpu", 1, 1),
        )
    }
    return {
        "interleaved_steps": len(pairs),
        "tab_step_seconds": [round(t[0], 3) for t in tab],
        "tab_step_cpu_seconds": [round(t[1], 3) for t in tab],
        "compare_step_seconds": [round(c[0], 3) for c in core],
        "compare_step_cpu_seconds": [round(c[1], 3) for c in core],
        # medians over the pairs after the first
        "tab_step_seconds_per_step": round(med["tab_wall"], 3),
        "compare_seconds_per_step": round(med["core_wall"], 3),
        "tab_step_cpu_seconds_per_step": round(med["tab_cpu"], 3),
        "compare_cpu_seconds_per_step": round(med["core_cpu"], 3),
        "tab_over_compare_per_step": round(med["tab_wall"] / med["core_wall"], 2),
        "tab_over_compare_cpu_per_step": round(med["tab_cpu"] / med["core_cpu"], 2),
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
    vs_compare = []
    for seed in args.seeds:  # the loop, then the browser, seed by seed: both see similar load
        runs.append(run_seed(seed, args))
        if args.vs_compare:  # after the loop, so the process's one-off costs are paid
            load_before = os.getloadavg()[0]  # the 1-minute load average, before and after
            vs = {"seed": seed, **tab_vs_compare(seed, args)}
            vs["load_before_after"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
            vs_compare.append(vs)
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
        "vs_compare": vs_compare,
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
            f"  seed {v['seed']}, {v['interleaved_steps']} steps interleaved (load "
            f"{v['load_before_after']}): a step in the tab {v['tab_step_seconds_per_step']} s / "
            f"{v['tab_step_cpu_seconds_per_step']} CPU-s, through the compare core "
            f"{v['compare_seconds_per_step']} s / {v['compare_cpu_seconds_per_step']} CPU-s: "
            f"{v['tab_over_compare_per_step']}x wall, {v['tab_over_compare_cpu_per_step']}x CPU "
            "(goal <= 1.3x; medians after the first pair)"
            for v in vs_compare
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
