"""Benchmark: the first load of a GGUF model (converted into the cache) vs every later load.

Each load runs in a new Python process, as a user's ``gmts analyze`` or a restarted server
would: the child imports the library (timed apart: ``import_s``), then ``load_model`` (timed:
``load_s`` wall and ``load_cpu_s``), and reports its peak resident set size. The first load
writes into a fresh cache folder (``$GMTS_GGUF_CACHE`` set to a temporary folder, unless
``--keep-cache``), so it converts; the ``--repeats`` loads after it read the checked cache.
Target: a second load of ``smollm2-135m`` <= 5 s.

    .venv/bin/python benchmarks/model_load.py                      # smollm2-135m, 1 thread
    .venv/bin/python benchmarks/model_load.py --threads 2 --repeats 5 --json
    .venv/bin/python benchmarks/model_load.py --model path/to/model.gguf --keep-cache
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_SECOND_LOAD_S = 5.0
REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="a packaged alias or a GGUF path")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads in each load")
    p.add_argument("--repeats", type=int, default=3, help="loads after the first (median)")
    p.add_argument("--keep-cache", action="store_true", help="use the user's cache as it is")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def gguf_path(model: str) -> Path:
    from gmts_core.model.packaged import PACKAGED_MODELS

    packaged = PACKAGED_MODELS.get(model)
    if packaged is None:
        return Path(model)
    found = packaged.path()
    if found is None:
        raise SystemExit(f"{model} is not installed: {packaged.install_command}")
    return found


def child(args: argparse.Namespace) -> None:
    """One load in this process; its figures as one JSON line."""
    import resource

    t0 = time.perf_counter()
    import torch

    from gmts_core.model.loading import load_model

    torch.set_num_threads(args.threads)
    t1, c1 = time.perf_counter(), time.process_time()
    lines: list[str] = []
    lm = load_model(gguf_path(args.model), device="cpu", dtype="float32", progress=lines.append)
    t2, c2 = time.perf_counter(), time.process_time()
    print(json.dumps({
        "import_s": t1 - t0,
        "load_s": t2 - t1,
        "load_cpu_s": c2 - c1,
        "converted": any("converting" in line for line in lines),
        "parameters": lm.num_parameters,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))  # fmt: skip


def one_load(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "--model", args.model]
    argv += ["--threads", str(args.threads)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"a load failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args)
        return
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory(prefix="gmts-load-") as tmp:
        if not args.keep_cache:
            env["GMTS_GGUF_CACHE"] = str(Path(tmp) / "gguf")
        load_before = os.getloadavg()[0]
        first = one_load(args, env)
        later = [one_load(args, env) for _ in range(args.repeats)]
        load_after = os.getloadavg()[0]
    second = statistics.median(r["load_s"] for r in later) if later else float("nan")
    report = {
        "benchmark": "model_load",
        "model": args.model,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "load_average_1m": [round(load_before, 2), round(load_after, 2)],
        "first": first,
        "later": later,
        "second_load_median_s": second,
        "target_s": TARGET_SECOND_LOAD_S,
        "meets_target": second <= TARGET_SECOND_LOAD_S,
    }
    later_s = ", ".join(f"{r['load_s']:.2f}" for r in later)
    lines = [
        f"{args.model}, {args.threads} thread(s), load {load_before:.2f} -> {load_after:.2f}",
        f"first load: {first['load_s']:.1f} s wall, {first['load_cpu_s']:.1f} s CPU "
        f"({'converted' if first['converted'] else 'cache already there'}), "
        f"peak RSS {first['peak_rss_mb']:.0f} MB",
        f"later loads: {later_s} s "
        f"(median {second:.2f} s; target <= {TARGET_SECOND_LOAD_S:.0f} s); "
        f"imports {statistics.median(r['import_s'] for r in later or [first]):.1f} s apart",
    ]
    if args.json:
        print(json.dumps(report))
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
