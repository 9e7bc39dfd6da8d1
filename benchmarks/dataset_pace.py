"""Does writing the analysed-run dataset keep pace with the analysis?

Writes a GMTS rollout JSONL run (``--steps`` steps of ``--groups`` demo-task prompts x 8
completions of varied length) to a temporary folder, then analyses it twice with the library's
own ``gmts analyze-run`` loop (:func:`gmts_core.runs.report.analyze_run_shard`, the bundled
model on CPU): once writing every step's per-token Parquet files (``--tokens all``, the
default) and once writing none (``--tokens none``). Reported: the analysis's tokens/s without
writing, the writer's own tokens/s (the seconds spent building the columns and writing the
files, timed inside the first pass), and the end-to-end ratio

    pace = tokens/s with writing / tokens/s without writing        (target >= 0.9)

The two passes alternate ``--repeats`` times and the medians are compared, so both see the
same machine load. The tiny model on CPU is the hard case: its analysis is fast, so the
writer's share of a step is the largest it gets; a real model's analysis takes longer per
token while writing costs the same.

    .venv/bin/python benchmarks/dataset_pace.py
    .venv/bin/python benchmarks/dataset_pace.py --steps 4 --groups 16 --repeats 1 --json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch
from _common import emit, machine, median

import gmts_core.runs.report as report
from gmts_core.config import AnalysisConfig
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.model.loading import load_model
from gmts_core.runs.registry import open_run
from gmts_core.runs.report import RunAnalysisPlan, analyze_run_shard, prepare_output, settings_of

TARGET = 0.9


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--groups", type=int, default=32, help="prompts per step (8 answers each)")
    p.add_argument("--repeats", type=int, default=3, help="alternating passes of each kind")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    return p.parse_args()


def write_run(path: Path, steps: int, groups: int, seed: int = 0) -> None:
    """Demo-task prompts, each with 8 completions of 1-6 worked lines (varied lengths)."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for step in range(steps):
            for _ in range(groups):
                a, b = rng.randint(10, 99), rng.randint(10, 99)
                answers = []
                for _ in range(8):
                    guess = a + b + rng.choice([0, 0, 1, -1, 10])
                    work = " ".join(f"{a}+{b}: {a % 10}+{b % 10}" for _ in range(rng.randint(1, 6)))
                    answers.append(f" {work} = {guess}")
                rewards = [float(x.endswith(f"= {a + b}")) for x in answers]
                row = {"step": step, "prompt": f"Q: {a}+{b}=?\nA:", "completions": answers}
                f.write(json.dumps({**row, "rewards": rewards}) + "\n")


def one_pass(run_path: Path, out: Path, lm: object, tokens: bool) -> tuple[float, float, int]:
    """(wall seconds, seconds writing the dataset, answer tokens) of one analysis pass."""
    shutil.rmtree(out, ignore_errors=True)
    run = open_run(run_path)
    steps = tuple(run.steps)
    plan = RunAnalysisPlan(steps, frozenset(steps) if tokens else frozenset())
    config = AnalysisConfig()
    prepare_output(out, settings_of(run, "tiny-arith", config, plan), resume=False)
    writing = [0.0]
    counted = [0]
    write_step, from_result = report.write_step, report.StepColumns.from_result

    def timed_write(root: Path, cols: object) -> None:
        start = time.perf_counter()
        write_step(root, cols)
        writing[0] += time.perf_counter() - start

    def timed_columns(step: int, result: object) -> object:
        start = time.perf_counter()
        cols = from_result(step, result)
        writing[0] += time.perf_counter() - start
        return cols

    def count(rep: object) -> None:
        counted[0] += int(getattr(rep, "num_tokens", 0) or 0)

    report.write_step = timed_write  # type: ignore[assignment]
    report.StepColumns.from_result = staticmethod(timed_columns)  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        analyze_run_shard(run, lm, config, plan, out, on_step=count)  # type: ignore[arg-type]
        wall = time.perf_counter() - start
    finally:
        report.write_step = write_step  # type: ignore[assignment]
        report.StepColumns.from_result = from_result  # type: ignore[method-assign]
    return wall, writing[0], counted[0]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    lm = load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu", dtype="float32")
    with tempfile.TemporaryDirectory() as tmp:
        run_path = Path(tmp) / "run.jsonl"
        write_run(run_path, args.steps, args.groups)
        one_pass(run_path, Path(tmp) / "warm", lm, tokens=True)  # warm-up
        with_w, without, writer_s = [], [], []
        tokens = 0
        for _ in range(args.repeats):
            wall, wsec, tokens = one_pass(run_path, Path(tmp) / "with", lm, tokens=True)
            with_w.append(wall)
            writer_s.append(wsec)
            without.append(one_pass(run_path, Path(tmp) / "without", lm, tokens=False)[0])
        size = sum(f.stat().st_size for f in (Path(tmp) / "with").rglob("*.parquet"))
    t_with, t_without, t_write = median(with_w), median(without), median(writer_s)
    pace = t_without / t_with
    out = {
        "benchmark": "dataset_pace",
        "steps": args.steps,
        "answers_per_step": 8 * args.groups,
        "answer_tokens": tokens,
        "analysis_tokens_per_s": tokens / t_without,
        "with_writing_tokens_per_s": tokens / t_with,
        "writer_tokens_per_s": tokens / t_write if t_write else None,
        "writer_share_of_a_pass": t_write / t_with,
        "pace": pace,
        "target": TARGET,
        "target_met": pace >= TARGET,
        "parquet_bytes": size,
        "seconds": {"with_writing": with_w, "without_writing": without, "writing": writer_s},
        "machine": machine(),
    }
    lines = [
        f"dataset pace: {tokens} answer tokens in {args.steps} steps x {8 * args.groups} answers",
        f"  analysis alone {tokens / t_without:,.0f} tokens/s; with writing "
        f"{tokens / t_with:,.0f} tokens/s; the writer alone {tokens / t_write:,.0f} tokens/s",
        f"  pace (with / without writing) {pace:.3f} (target >= {TARGET}); writing is "
        f"{100 * t_write / t_with:.1f}% of a pass; {size / 1e6:.2f} MB of Parquet; load "
        f"{out['machine']['load_average_1m']}",
    ]
    emit(out, args.json, lines)


if __name__ == "__main__":
    main()
