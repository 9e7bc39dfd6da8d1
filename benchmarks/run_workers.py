"""The cost of parsing run files in worker processes (``gmts_core.runs.worker``) on an
ordinary step, through a real server.

Builds three ordinary runs in a temporary folder: a verl run (16 prompts x 8 answers per
step, analysed on demand with the bundled ``tiny-arith``), a TRL run (the same, as parquet)
and a trainer log (a logged step of 128 answers x 32 tokens, no analysis). Each step is
fetched ``--repeat`` times with ``GET /v1/runs/{run}/steps/{n}`` (different steps, so no
report cache helps) from a server whose run files are read by worker processes (as served)
and each step's reading alone (``Run.step``) is timed in a worker and in this process,
interleaved. The overhead is the extra time of the worker's reading over the step served
with the readers in process: (worker - in process) / (step view - worker + in process).

    python benchmarks/run_workers.py [--repeat 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import LiveServer, emit, machine, median  # noqa: E402

from app.core.config import Settings  # noqa: E402
from app.main import create_app  # noqa: E402
from gmts_core.runs import open_run  # noqa: E402
from gmts_core.runs.trainer_log import SCHEMA  # noqa: E402

PROMPTS, ANSWERS, STEPS = 16, 8, 40


def build(root: Path) -> None:
    rng = random.Random(0)

    def answer() -> str:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f" {a}+{b} = {a + b}. " * rng.randint(1, 4)

    (root / "verl").mkdir()
    (root / "trl" / "completions").mkdir(parents=True)
    (root / "log" / "gmts_selection").mkdir(parents=True)
    for step in range(1, STEPS + 1):
        rows = [
            {
                "input": f"Q{step}.{p}: 47+38=?",
                "output": answer(),
                "score": rng.random(),
                "step": step,
            }
            for p in range(PROMPTS)
            for _ in range(ANSWERS)
        ]
        (root / "verl" / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        table = pa.table(
            {
                "step": [step] * len(rows),
                "prompt": [r["input"] for r in rows],
                "completion": [r["output"] for r in rows],
                "accuracy": [r["score"] for r in rows],
                "advantage": [r["score"] - 0.5 for r in rows],
            }
        )
        pq.write_table(table, root / "trl" / "completions" / f"completions_{step:05d}.parquet")
        n_answers, n_tokens = 128, 32
        cols: dict[str, list[Any]] = {n: [] for n in SCHEMA.names}
        for a in range(n_answers):
            for t in range(n_tokens):
                values = dict(
                    step=step, micro_batch=a // 16, answer=a % 16, position=t,
                    prompt=f"Q{a // 8}", completion=f" answer {a}", token_id=rng.randint(3, 40),
                    entropy=rng.random(), logprob=-rng.random(), grad_norm=rng.random(),
                    grad_proxy=rng.random(), advantage=(a % 8) / 8 - 0.5, weight=1.0,
                    omega=None, method="gmts", selected=rng.random() < 0.2,
                    selected_entropy=rng.random() < 0.2, selected_gmts=rng.random() < 0.2,
                )  # fmt: skip
                for k, v in values.items():
                    cols[k].append(v)
        pq.write_table(
            pa.table(cols, schema=SCHEMA),
            root / "log" / "gmts_selection" / f"selection_{step:05d}.parquet",
        )


def time_steps(root: Path, repeat: int) -> dict[str, dict[str, float]]:
    """Per run: the median step view as served (workers), and the median reading of a step
    in a worker and in this process, interleaved (the machine's load hits both alike)."""
    settings = Settings(
        run_roots=[root], default_model="tiny-arith", ui_enabled=False, api_key=None,
        torch_threads=1, run_list_wait_s=60,
    )  # fmt: skip
    app = create_app(settings)
    runs = app.state.services.runs
    out: dict[str, dict[str, float]] = {}
    with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=600) as http:
        for run in ("verl", "trl", "log"):
            http.get(f"/v1/runs/{run}/steps/{STEPS}").raise_for_status()  # warm: model, worker
            remote = runs.open(run)
            local = open_run(remote.path, limits=remote.limits)  # the readers, in process
            views, worker, here = [], [], []
            for step in range(1, repeat + 1):
                start = time.perf_counter()
                http.get(f"/v1/runs/{run}/steps/{step}").raise_for_status()
                views.append(time.perf_counter() - start)
                for opened, took in ((remote, worker), (local, here)):
                    start = time.perf_counter()
                    opened.step(step)
                    took.append(time.perf_counter() - start)
            view, w, h = median(views) * 1e3, median(worker) * 1e3, median(here) * 1e3
            out[run] = {
                "step_view_ms": view,
                "read_in_worker_ms": w,
                "read_in_process_ms": h,
                "overhead": (w - h) / (view - w + h),  # of the step served in process
            }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root)
        runs = time_steps(root, args.repeat)
    report: dict[str, Any] = {"machine": machine(), "runs": runs}
    lines = [f"{'run':5} {'step view':>10} {'read: worker':>13} {'in process':>11} {'overhead':>9}"]
    for run, r in runs.items():
        lines.append(
            f"{run:5} {r['step_view_ms']:8.1f}ms {r['read_in_worker_ms']:11.1f}ms "
            f"{r['read_in_process_ms']:9.1f}ms {r['overhead']:+9.1%}"
        )
    emit(report, args.json, lines)


if __name__ == "__main__":
    main()
