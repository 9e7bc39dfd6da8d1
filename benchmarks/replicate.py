"""Replication study: does GMTS beat entropy, and where? Five methods, two regimes, many seeds.

Trains ``all``, ``entropy``, ``gmts``, ``gmts_paper`` and ``random`` side by side on the demo
task with the library's compare (:func:`gmts_core.experiments.compare.run_compare`: every method
from the same start, step n of seed s draws the same prompts for every method, held-out
accuracy with common sampling seeds), in two regimes of the task (``CompareConfig.task_mix``):

* ``default``: the demo task's two-digit problems;
* ``hard-mix``: half of every batch three-digit sums beyond the demo model, so about half the
  groups are zero-signal (every answer wrong, every advantage 0).

The recipe is the classroom recipe (``CLASS_RECIPE``: G = 8, lr 1.5e-4 with 5 warm-up steps,
one update a batch) at 16 prompts a step instead of 32 (80 runs must fit in 30 minutes on 2
shared cores) and with answers capped at 32 tokens (the longest correct solution is 28 tokens
and its end; the hard prompts' rambling answers would otherwise pad every batch to 48), ratio
0.2 at batch scope for every method, as ``gmts compare`` runs them. The work is split into one
compare per (regime, method) over ``--jobs`` processes of one torch thread each (a run depends
only on its method, seed and regime, so the split changes no number), and the runs of a regime
are put back together into one ``CompareResult``: its final table (accuracy, gain over the
start, paired difference to entropy, each with the t interval over seeds and held-out problems
of :mod:`gmts_core.experiments.compare_stats`), its conclusions and their power advice (seeds
for 80% power at 3 points, from this run's own variance components). The curves get 95% t
intervals over seeds. ``--seed-offset`` and ``--eval-seed`` choose other training seeds and
other evaluation draws (a re-run with other seeds), ``--eval-samples`` the answers per
held-out problem.

    .venv/bin/python benchmarks/replicate.py --json docs/replication.json --svg docs/replication.svg
    .venv/bin/python benchmarks/replicate.py --quick --json    # a smoke run, JSON on stdout

The plateau replication (docs/replication.md: the regime where the selections differ most,
entropy against gmts, 200 steps, 8 answers per held-out problem, seeds no earlier run used, as
many as the power advice of a previous run asked for), one block per seed, then merged:

    .venv/bin/python benchmarks/replicate.py --regimes hard-mix --methods entropy,gmts \
        --seeds 1 --steps 200 --eval-every 25 --eval-samples 8 --prompts-per-step 32 \
        --jobs 1 --seed-offset 600 --eval-seed 70000 --compare-out /tmp/p200/c600 \
        --json /tmp/p200/r600.json          # and 601 ... 609, two at a time
    .venv/bin/python benchmarks/replicate.py --merge-seeds /tmp/p200/r6*.json \
        --json docs/replication-hardmix-200.json --svg docs/replication-hardmix-200.svg
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine

from gmts_core.experiments.compare import CompareConfig, CompareResult, run_compare
from gmts_core.experiments.intervals import mean_interval
from gmts_core.grpo.step import CLASS_RECIPE
from gmts_core.tasks.mixes import task_mix_names

METHODS = ("all", "entropy", "gmts", "gmts_paper", "random")
REGIMES = ("default", "hard-mix")
STUDY_RECIPE = dataclasses.replace(CLASS_RECIPE, prompts_per_step=16, max_new_tokens=32)
TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 50)  # axis tick spacings
DASHED = {"gmts_paper"}  # drawn dashed: it can lie right on gmts's line
COLOURS = {  # Okabe-Ito, distinguishable with colour-blindness
    "all": "#000000",
    "entropy": "#E69F00",
    "gmts": "#0072B2",
    "gmts_paper": "#009E73",
    "random": "#CC79A7",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--regimes", default=",".join(REGIMES), help="task mixes, comma-separated")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--eval-problems", type=int, default=200)
    p.add_argument("--prompts-per-step", type=int, default=STUDY_RECIPE.prompts_per_step)
    p.add_argument("--group-size", type=int, default=STUDY_RECIPE.group_size)
    p.add_argument("--max-new-tokens", type=int, default=STUDY_RECIPE.max_new_tokens)
    p.add_argument("--ratio", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=STUDY_RECIPE.learning_rate, help="AdamW lr")
    p.add_argument("--warmup-steps", type=int, default=STUDY_RECIPE.warmup_steps)
    p.add_argument(
        "--decay-steps",
        type=int,
        default=STUDY_RECIPE.decay_steps,
        help="cosine decay of the lr to 0 over this many steps after the warm-up (0: none)",
    )
    p.add_argument(
        "--inner-steps", type=int, default=STUDY_RECIPE.inner_steps, help="updates per batch"
    )
    p.add_argument(
        "--seed-offset", type=int, default=0, help="first training seed (runs: offset, +1, ...)"
    )
    p.add_argument(
        "--eval-seed",
        type=int,
        default=CompareConfig().eval_seed,
        help="evaluation sampling seed (step n: this + n)",
    )
    p.add_argument("--eval-samples", type=int, default=1, help="answers per held-out problem")
    p.add_argument("--eval-temperature", type=float, default=1.0)
    p.add_argument(
        "--jobs", type=int, default=None, help="worker processes, 1 torch thread each (default 2)"
    )
    p.add_argument("--model", default="", help="model folder (default: the bundled tiny-arith)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 2 seeds, 2 steps, 4 prompts x G = 4, 8 held-out problems, 1 job",
    )
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="write the report as JSON to PATH (no PATH: print it on stdout, nothing else)",
    )
    p.add_argument("--svg", default=None, metavar="PATH", help="write the curves as an SVG")
    p.add_argument(
        "--replot",
        nargs="+",
        default=None,
        metavar="JSON",
        help="train nothing: read reports this script wrote (several: the same methods, seeds "
        "and steps in other regimes, drawn side by side), print the summary, write --svg and "
        "--json PATH (the merged report)",
    )
    p.add_argument(
        "--compare-out", default=None, metavar="DIR", help="also DIR/<regime>/compare.json"
    )
    p.add_argument(
        "--merge-seeds",
        nargs="+",
        default=None,
        metavar="JSON",
        help="train nothing: reports of one design run in blocks of consecutive seeds (each "
        "with --compare-out) as one report of all their seeds; writes --json PATH and --svg",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.eval_every, args.eval_problems = 2, 2, 1, 8
        args.prompts_per_step, args.group_size = 4, 4
    if args.jobs is None:
        args.jobs = 1 if args.quick else 2
    return args


def study_config(args: argparse.Namespace, regime: str, methods: tuple[str, ...]) -> CompareConfig:
    rl = dataclasses.replace(
        STUDY_RECIPE,
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.lr,
        warmup_steps=args.warmup_steps,
        decay_steps=args.decay_steps,
        inner_steps=args.inner_steps,
    )
    config = CompareConfig(
        methods=methods,
        ratio=args.ratio,
        steps=args.steps,
        seeds=args.seeds,
        eval_every=args.eval_every,
        eval_problems=args.eval_problems,
        task_mix=regime,
        rl=rl,
        seed_offset=args.seed_offset,
        eval_seed=args.eval_seed,
        eval_samples=args.eval_samples,
        eval_temperature=args.eval_temperature,
    )
    config.validate()
    return config


_MODEL: Any = None


def _load(model: str) -> Any:
    """The worker's model, loaded once per process on one torch thread."""
    global _MODEL
    if _MODEL is None:
        import torch

        from gmts_core.demo import DEMO_MODEL_DIR
        from gmts_core.model.loading import load_model

        torch.set_num_threads(1)
        _MODEL = load_model(model or DEMO_MODEL_DIR, name="tiny-arith", device="cpu")
    return _MODEL


def run_unit(model: str, config: CompareConfig) -> CompareResult:
    """One compare: one regime, one method, every seed."""
    label = f"{config.task_mix}/{config.methods[0]}"

    def progress(done: int, total: int, _text: str) -> None:
        if done % config.steps == 0:
            print(f"[{label}] {done}/{total} steps", file=sys.stderr, flush=True)

    return run_compare(_load(model), config, progress)


def merge(parts: list[CompareResult], config: CompareConfig) -> CompareResult:
    """The compares of one regime's methods as one compare of every method (each run is the
    same whatever other methods ran beside it: same start, seeds, batches and held-out set)."""
    first = parts[0]
    for part in parts[1:]:
        if part.start_per_problem != first.start_per_problem:
            raise RuntimeError("the parts of a regime evaluated different start models")
    by_key = {(r.method, r.seed): r for part in parts for r in part.runs}
    seeds = range(config.seed_offset, config.seed_offset + config.seeds)
    runs = [by_key[m, s] for s in seeds for m in config.methods]
    seconds = sum(part.seconds for part in parts)
    return CompareResult(
        config, first.model, runs, first.start_accuracy, seconds, first.start_per_problem
    )


def _interval(values: np.ndarray) -> list[dict[str, float]]:
    """(M, S) per-seed values -> per method: mean and the 95% Student t interval over seeds
    (S - 1 degrees of freedom; a curve's point, not the final table's seeds x problems)."""
    out = []
    for row in values:
        i = mean_interval(row[:, None])
        out.append({"mean": i.mean, "ci_low": i.ci_low, "ci_high": i.ci_high})
    return out


def curves(result: CompareResult) -> dict[str, Any]:
    """Per method and step: held-out accuracy, its paired difference to entropy, training
    reward, zero-signal share of the groups and the wasted share of the method's own selection,
    each a mean over seeds with a 95% t interval over seeds."""
    c = result.config
    methods, seeds = c.methods, range(c.seed_offset, c.seed_offset + c.seeds)
    runs = {(r.method, r.seed): r for r in result.runs}
    ref = result.reference_method()

    def table(get: Any) -> np.ndarray:
        return np.asarray([[get(runs[m, s]) for s in seeds] for m in methods], dtype=np.float64)

    out: dict[str, Any] = {m: {"accuracy": [], "vs_reference": [], "reward": []} for m in methods}
    for step in c.eval_steps():
        acc = table(lambda r, step=step: r.accuracy[step])
        diff = acc - acc[list(methods).index(ref)][None]
        for m, a, d in zip(methods, _interval(acc), _interval(diff), strict=True):
            out[m]["accuracy"].append({"step": step, **a})
            out[m]["vs_reference"].append({"step": step, **d})
    for m in methods:
        out[m]["zero_signal_share"] = []
        out[m]["wasted_share"] = []
    for i in range(c.steps):
        reward = _interval(table(lambda r, i=i: r.reward[i]))
        zero = table(lambda r, i=i: r.zero_signal_groups[i] / c.rl.prompts_per_step)
        wasted = [[runs[m, s].wasted_share[i].get(m, np.nan) for s in seeds] for m in methods]
        for k, m in enumerate(methods):
            out[m]["reward"].append({"step": i + 1, **reward[k]})
            out[m]["zero_signal_share"].append(float(zero[k].mean()))
            out[m]["wasted_share"].append(float(np.mean(wasted[k])))
    return out


def plateau(result: CompareResult) -> dict[str, Any]:
    """Per method, the training reward's slope (reward per 10 steps, a least-squares line per
    seed) over the first and the last quarter of the steps, each a mean over seeds with its 95%
    t interval over seeds: a plateau is a last-quarter slope whose interval holds 0 (or is
    small against the first quarter's). With 8 steps or more, ``quarters`` has every quarter:
    its slope, its mean reward (per seed over the quarter, then over seeds) and that mean's
    change from the previous quarter (paired per seed), each with its interval."""
    c = result.config
    if c.steps < 2:
        return {}
    quarter = min(c.steps, max(2, c.steps // 4))
    spans = {"first_quarter": (0, quarter), "last_quarter": (c.steps - quarter, c.steps)}
    cuts = [round(k * c.steps / 4) for k in range(5)]
    quarters = list(itertools.pairwise(cuts)) if c.steps >= 8 else []

    def slopes(runs: list[Any], a: int, b: int) -> dict[str, float]:
        x = np.arange(a + 1, b + 1, dtype=np.float64)
        per_seed = np.asarray([10 * np.polyfit(x, r.reward[a:b], 1)[0] for r in runs])
        return _interval(per_seed[None, :])[0]

    out: dict[str, Any] = {}
    for m in c.methods:
        runs = result.runs_of(m)
        out[m] = {
            name: {"steps": [a + 1, b], **slopes(runs, a, b)} for name, (a, b) in spans.items()
        }
        means = np.asarray([[np.mean(r.reward[a:b]) for r in runs] for a, b in quarters])
        out[m]["quarters"] = [
            {
                "steps": [a + 1, b],
                "slope": slopes(runs, a, b),
                "reward": _interval(means[k][None, :])[0],
                # per seed: this quarter's mean reward minus the previous quarter's
                "change": _interval((means[k] - means[k - 1])[None, :])[0] if k else None,
            }
            for k, (a, b) in enumerate(quarters)
        ]
    return out


def regime_report(result: CompareResult) -> dict[str, Any]:
    c = result.config
    zero = [z / c.rl.prompts_per_step for r in result.runs for z in r.zero_signal_groups]
    return {
        "task_mix": c.task_mix,
        "start_accuracy": result.start_accuracy,
        "zero_signal_share": statistics.fmean(zero),
        "table": result.table(),
        "conclusions": result.conclusions(),
        "curves": curves(result),
        "reward_slope_per_10_steps": plateau(result),
        "seconds_of_compute": round(result.seconds, 1),
    }


def uptime() -> str:
    try:
        return Path("/proc/loadavg").read_text(encoding="utf-8").strip()
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_study(args: argparse.Namespace) -> dict[str, Any]:
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    regimes = tuple(r.strip() for r in args.regimes.split(",") if r.strip())
    for regime in regimes:
        if regime not in task_mix_names():
            raise SystemExit(f"unknown regime {regime!r}; valid: {', '.join(task_mix_names())}")
    configs = {r: study_config(args, r, methods) for r in regimes}
    # the costlier regime first, so two workers finish at about the same time
    units = [(r, m) for r in sorted(regimes, key=lambda r: r == "default") for m in methods]
    load_before = uptime()
    began = time.perf_counter()
    if args.jobs <= 1:
        done = {u: run_unit(args.model, study_config(args, u[0], (u[1],))) for u in units}
    else:
        context = get_context("spawn")
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
            futures = {
                u: pool.submit(run_unit, args.model, study_config(args, u[0], (u[1],)))
                for u in units
            }
            done = {u: f.result() for u, f in futures.items()}
    wall = time.perf_counter() - began
    cpu = sum(
        u.ru_utime + u.ru_stime
        for u in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )
    results = {r: merge([done[r, m] for m in methods], configs[r]) for r in regimes}
    if args.compare_out:
        from app.services.compare import write_outputs  # the app's writer: only when asked

        for r, result in results.items():
            write_outputs(result, Path(args.compare_out) / r)
    c = configs[regimes[0]]
    return {
        "benchmark": "replicate",
        "command": "python benchmarks/replicate.py " + " ".join(sys.argv[1:]),
        "methods": list(methods),
        "regimes": {r: regime_report(results[r]) for r in regimes},
        "settings": {
            "seeds": args.seeds,
            "steps": args.steps,
            "eval_every": args.eval_every,
            "eval": f"{args.eval_problems} held-out two-digit problems x {args.eval_samples} "
            f"answer(s) at T={args.eval_temperature:g}",
            "seed_offset": args.seed_offset,
            "eval_seed": args.eval_seed,
            "ratio": args.ratio,
            "scope": c.rl.scope,
            "recipe": dataclasses.asdict(c.rl),
            "jobs": args.jobs,
            "torch_threads_per_job": 1,
        },
        "wall_seconds": round(wall, 1),
        # the CPU time of this process and its workers: what the study costs whatever the load
        "cpu_seconds": round(cpu, 1),
        "load_before": load_before,
        "load_after": uptime(),
        "machine": machine(),
        "compare_out": str(Path(args.compare_out).resolve()) if args.compare_out else None,
    }


def merge_seeds(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Reports of one design run in blocks of consecutive training seeds (each written with
    --compare-out), as the one report of all their seeds: the runs are put back together from
    each block's compare.json, so the table, its intervals, conclusions and curves are those of
    the whole; each block's command, wall time and load are kept in ``runs``."""
    from app.services.compare import load_compare_file  # reads each block's compare.json

    if any(not r.get("compare_out") for r in reports):
        raise SystemExit("--merge-seeds: every report needs its --compare-out folder")
    reports = sorted(reports, key=lambda r: r["settings"]["seed_offset"])
    first, regimes = reports[0], list(reports[0]["regimes"])
    out: dict[str, Any] = {}
    for regime in regimes:
        parts = [
            load_compare_file(Path(r["compare_out"]) / regime / "compare.json") for r in reports
        ]
        offset = parts[0].config.seed_offset
        for part in parts:
            same = dataclasses.replace(part.config, seeds=1, seed_offset=0)
            if same != dataclasses.replace(parts[0].config, seeds=1, seed_offset=0):
                raise SystemExit("--merge-seeds: the blocks differ in more than their seeds")
            if (
                part.config.seed_offset != offset
                or part.start_per_problem != parts[0].start_per_problem
            ):
                raise SystemExit(
                    "--merge-seeds: the blocks' seeds are not consecutive, or their "
                    "start models were evaluated differently"
                )
            offset += part.config.seeds
        config = dataclasses.replace(parts[0].config, seeds=offset - parts[0].config.seed_offset)
        runs = [run for part in parts for run in part.runs]
        merged = CompareResult(
            config,
            parts[0].model,
            runs,
            parts[0].start_accuracy,
            sum(p.seconds for p in parts),
            parts[0].start_per_problem,
        )
        out[regime] = regime_report(merged)
    keys = ("command", "wall_seconds", "cpu_seconds", "load_before", "load_after")
    settings = {**first["settings"], "seeds": sum(r["settings"]["seeds"] for r in reports)}
    return {
        **first,
        "regimes": out,
        "settings": settings,
        "runs": [{k: r.get(k) for k in keys} for r in reports],
        "wall_seconds": round(sum(r["wall_seconds"] for r in reports), 1),
        "cpu_seconds": round(sum(r.get("cpu_seconds", 0.0) for r in reports), 1),
        "load_after": reports[-1]["load_after"],
    }


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Reports of other regimes with the same methods and settings, as one report; each run's
    command, wall time and load are kept in ``runs``."""
    first = reports[0]
    if len(reports) == 1:
        return first
    for other in reports[1:]:
        if other["methods"] != first["methods"] or other["settings"] != first["settings"]:
            raise SystemExit("--replot: the reports differ in methods or settings")
    regimes = {r: rep for report in reports for r, rep in report["regimes"].items()}
    keys = ("command", "wall_seconds", "cpu_seconds", "load_before", "load_after")
    runs = [{k: report.get(k) for k in keys} for report in reports]
    return {
        **first,
        "regimes": regimes,
        "runs": runs,
        "wall_seconds": round(sum(r["wall_seconds"] for r in reports), 1),
        "cpu_seconds": round(sum(r.get("cpu_seconds", 0.0) for r in reports), 1),
        "load_after": reports[-1]["load_after"],
    }


# --- the curves as an SVG (no plotting library needed) -----------------------------------------


def _polyline(points: list[tuple[float, float]], colour: str, dashed: bool = False) -> str:
    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    return f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.8"{dash}/>'


def _panel(
    x0: float, y0: float, w: float, h: float, title: str, series: dict[str, list[dict[str, float]]],
    key_x: str, y_range: tuple[float, float], y_label: str, steps: int, band: bool,
) -> list[str]:  # fmt: skip
    lo, hi = y_range
    sx = lambda v: x0 + w * v / steps  # noqa: E731
    sy = lambda v: y0 + h - h * (v - lo) / (hi - lo)  # noqa: E731
    out = [
        f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="#fff" stroke="#999"/>',
        f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-size="13" '
        f'font-weight="bold">{title}</text>',
        f'<text x="{x0 - 38}" y="{y0 + h / 2}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 {x0 - 38} {y0 + h / 2})">{y_label}</text>',
        f'<text x="{x0 + w / 2}" y="{y0 + h + 30}" text-anchor="middle" font-size="11">'
        "training step</text>",
    ]
    tick = next(t for t in TICKS if (hi - lo) / t <= 7)
    for k in range(int(np.ceil(lo / tick - 1e-9)), int(np.floor(hi / tick + 1e-9)) + 1):
        v = k * tick
        grid = "#999" if k == 0 and lo < 0 else "#eee"  # the zero line of a difference
        label = f"{v:.0f}" if tick >= 1 else f"{v:.2f}"
        out.append(
            f'<line x1="{x0}" x2="{x0 + w}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="{grid}"/>'
            f'<text x="{x0 - 4}" y="{sy(v) + 4:.1f}" text-anchor="end" font-size="10">'
            f"{label}</text>"
        )
    for k in range(0, steps + 1, max(1, steps // 6)):
        out.append(
            f'<text x="{sx(k):.1f}" y="{y0 + h + 14}" text-anchor="middle" font-size="10">'
            f"{k}</text>"
        )
    clamp = lambda v: min(max(v, lo), hi)  # noqa: E731
    for method, points in series.items():
        colour = COLOURS.get(method, "#555")
        if band:
            upper = [(sx(p[key_x]), sy(clamp(p["ci_high"]))) for p in points]
            lower = [(sx(p[key_x]), sy(clamp(p["ci_low"]))) for p in reversed(points)]
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower)
            out.append(f'<polygon points="{d}" fill="{colour}" fill-opacity="0.12" stroke="none"/>')
        line = [(sx(p[key_x]), sy(clamp(p["mean"]))) for p in points]
        out.append(_polyline(line, colour, method in DASHED))
    return out


def _span(values: list[float], step: float, floor: float | None = None) -> tuple[float, float]:
    """An axis range covering ``values``, rounded out to multiples of ``step``."""
    lo, hi = np.floor(min(values) / step) * step, np.ceil(max(values) / step) * step
    return (lo if floor is None else max(lo, floor)), hi


def write_svg(report: dict[str, Any], path: Path) -> None:
    """One column per regime: held-out accuracy (top), each method minus entropy on the same
    seeds and problems, in points (middle), and the wasted share of each method's own
    selection (bottom); means over seeds, shaded: 95% t intervals over seeds."""
    regimes = list(report["regimes"])
    methods = report["methods"]
    steps = report["settings"]["steps"]
    w, h, left, top, gap_x, gap_y = 360, 200, 70, 60, 90, 80
    width = left + len(regimes) * (w + gap_x)
    height = top + 3 * (h + gap_y) + 30
    body: list[str] = []
    curves = {r: report["regimes"][r]["curves"] for r in regimes}
    ref = report["regimes"][regimes[0]]["table"][0]["reference"]
    bounds = [
        v
        for r in regimes
        for m in methods
        for p in curves[r][m]["accuracy"]
        for v in (p["ci_low"], p["ci_high"])
    ]
    acc_range = _span(bounds, 0.05, 0.0)
    diffs = {
        r: {
            m: [
                {**p, **{k: 100 * p[k] for k in ("mean", "ci_low", "ci_high")}}
                for p in c[m]["vs_reference"]
            ]
            for m in methods
            if m != ref
        }
        for r, c in curves.items()
    }
    bounds = [
        v
        for d in diffs.values()
        for pts in d.values()
        for p in pts
        for v in (p["ci_low"], p["ci_high"])
    ]
    diff_range = _span(bounds, 5.0)
    for i, r in enumerate(regimes):
        x0 = left + i * (w + gap_x)
        acc = {m: curves[r][m]["accuracy"] for m in methods}
        title = f"{r}: held-out accuracy ({report['settings']['seeds']} seeds)"
        body += _panel(x0, top, w, h, title, acc, "step", acc_range, "accuracy", steps, True)
        y1 = top + h + gap_y
        title = f"{r}: method \u2212 {ref}, paired (points)"
        body += _panel(x0, y1, w, h, title, diffs[r], "step", diff_range, "points", steps, True)
        wasted = {
            m: [
                {"step": k + 1, "mean": v}
                for k, v in enumerate(curves[r][m]["wasted_share"])
                if v == v  # a method without a wasted share (NaN) is left out
            ]
            for m in methods
        }
        title = f"{r}: wasted share of the method's selection"
        y2 = top + 2 * (h + gap_y)
        body += _panel(x0, y2, w, h, title, wasted, "step", (0.0, 1.0), "share", steps, False)
    legend_y = height - 16
    for k, m in enumerate(methods):
        x = left + k * 120
        dash = ' stroke-dasharray="6 4"' if m in DASHED else ""
        body.append(
            f'<line x1="{x}" x2="{x + 22}" y1="{legend_y - 4}" y2="{legend_y - 4}" '
            f'stroke="{COLOURS.get(m, "#555")}" stroke-width="3"{dash}/>'
            f'<text x="{x + 28}" y="{legend_y}" font-size="12">{m}</text>'
        )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">'
        f'<rect width="100%" height="100%" fill="#fff"/>{"".join(body)}</svg>\n'
    )
    path.write_text(svg, encoding="utf-8")


# --- the summary -------------------------------------------------------------------------------


def summary(report: dict[str, Any]) -> list[str]:
    s = report["settings"]
    cpu = report.get("cpu_seconds", "?")
    lines = [
        f"{len(report['methods'])} methods x {s['seeds']} seeds x {s['steps']} steps per regime, "
        f"{s['jobs']} job(s); wall {report['wall_seconds']} s, CPU {cpu} s; "
        f"load before {report['load_before']}, after {report['load_after']}"
    ]
    for r, rep in report["regimes"].items():
        lines.append(
            f"{r}: start accuracy {rep['start_accuracy']:.3f}, zero-signal share of the groups "
            f"{rep['zero_signal_share']:.2f}"
        )
        for row in rep["table"]:
            acc, gain = row["final_accuracy"], row["gain"]
            lines.append(
                f"  {row['method']:<11} final {acc['mean']:.3f} [{acc['ci_low']:.3f}, "
                f"{acc['ci_high']:.3f}]  gain {100 * gain['mean']:+.1f} points  "
                f"wasted {row['wasted_share']['mean']:.2f}"
            )
        lines += [f"  {sentence}" for sentence in rep["conclusions"]]
        for m, q in (rep.get("reward_slope_per_10_steps") or {}).items():
            a, b = q["first_quarter"], q["last_quarter"]
            lines.append(
                f"  {m:<11} training reward per 10 steps: steps {a['steps'][0]}-{a['steps'][1]} "
                f"{a['mean']:+.3f} [{a['ci_low']:+.3f}, {a['ci_high']:+.3f}], steps "
                f"{b['steps'][0]}-{b['steps'][1]} {b['mean']:+.3f} [{b['ci_low']:+.3f}, "
                f"{b['ci_high']:+.3f}]"
            )
            for k in q.get("quarters", []):
                lines.append(
                    f"  {m:<11} steps {k['steps'][0]}-{k['steps'][1]}: reward "
                    f"{k['reward']['mean']:.3f}, slope per 10 steps {k['slope']['mean']:+.3f} "
                    f"[{k['slope']['ci_low']:+.3f}, {k['slope']['ci_high']:+.3f}]"
                    + (
                        f", change {k['change']['mean']:+.3f} [{k['change']['ci_low']:+.3f}, "
                        f"{k['change']['ci_high']:+.3f}]"
                        if k["change"]
                        else ""
                    )
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replot or args.merge_seeds:
        read = [json.loads(Path(p).read_text("utf-8")) for p in args.replot or args.merge_seeds]
        report = merge_reports(read) if args.replot else merge_seeds(read)
        if args.svg:
            write_svg(report, Path(args.svg))
        if args.json == "-":
            print(json.dumps(report))
            return 0
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1) + "\n", "utf-8")
        print("\n".join(summary(report)))
        return 0
    report = run_study(args)
    if args.svg:
        write_svg(report, Path(args.svg))
    if args.json == "-":
        print(json.dumps(report, default=float))
        return 0
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=float) + "\n", "utf-8")
    print("\n".join(summary(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
