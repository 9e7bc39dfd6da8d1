"""An analysed run at real scale: write a synthetic dataset of a million rollouts, serve it, and
time what the Runs tab asks for, with the server's memory and /healthz meanwhile.

    python benchmarks/run_dataset_scale.py                      # 128 steps x 8,192 answers
    python benchmarks/run_dataset_scale.py --steps 4 --answers 512 --json   # a smoke run

The dataset (gmts_core.run_dataset.synthetic: log-normal answer lengths, median 70 tokens,
~105 on average, so ~110M tokens) is written with the writer `gmts analyze-run` uses, into
``--out`` (kept and reused when it was made with the same sizes). Then ``gmts serve`` runs as
a separate process (its RSS is its own, read from /proc) with the dataset's folder under
GMTS_RUN_ROOTS, and one client asks, in turn:

- step views: a page of a random step's groups, one group's answers, one answer's tokens;
- whole-run queries: answers ranked by each order, a text search, the zero-signal filter and
  groups, tokens ranked by each order;

while a second client asks /healthz every 0.2 s. Printed: p50/p95 of each kind, the worst
/healthz, the server's peak and final RSS, the writer's tokens/s and the disk size per million
tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
from _common import emit, free_port, machine, percentile

from gmts_core.run_dataset import ANSWER_ORDERS, TOP_ORDERS, write_step
from gmts_core.run_dataset.schema import write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--answers", type=int, default=8192, help="Answers per step.")
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--median-length", type=float, default=70.0)
    p.add_argument("--rounds", type=int, default=20, help="Rounds of every query kind.")
    p.add_argument("--out", type=Path, default=Path("/tmp/gmts-scale-runs"))
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def build(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write the dataset (or reuse one of the same sizes); the writer's throughput."""
    sizes = {
        "steps": args.steps,
        "answers": args.answers,
        "group_size": args.group_size,
        "median_length": args.median_length,
    }
    manifest = root / "dataset.json"
    if manifest.is_file() and json.loads(manifest.read_text())["settings"] == sizes:
        return {"reused": True}
    shutil.rmtree(root, ignore_errors=True)
    write_manifest(root, ("entropy", "gmts"), sizes)
    rng = np.random.default_rng(0)
    tokens, write_s = 0, 0.0
    for step in range(1, args.steps + 1):
        cols = synthetic_step(
            step, args.answers // args.group_size, args.group_size, rng, args.median_length
        )
        start = time.perf_counter()
        write_step(root, cols)
        write_s += time.perf_counter() - start
        tokens += len(cols.gamma)
    return {"reused": False, "write_tokens_per_s": tokens / write_s, "write_s": write_s}


def disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


class Health(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.times, self.stop = url, [], threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            while not self.stop.wait(0.2):
                start = time.perf_counter()
                http.get("/healthz").raise_for_status()
                self.times.append(time.perf_counter() - start)


def timed(http: httpx.Client, path: str, params: dict[str, Any] | None = None) -> tuple[float, Any]:
    start = time.perf_counter()
    r = http.get(path, params=params)
    seconds = time.perf_counter() - start
    r.raise_for_status()
    return seconds, r.json()


def measure(url: str, run_id: str, args: argparse.Namespace) -> dict[str, list[float]]:
    rnd = random.Random(0)
    times: dict[str, list[float]] = {"step_view": [], "run_filter": [], "token_ranking": []}
    base = f"/v1/analysed-runs/{run_id}"
    groups_per_step = args.answers // args.group_size
    with httpx.Client(base_url=url, timeout=120) as http:
        timed(http, f"{base}/steps")  # the run's first open
        for _ in range(args.rounds):
            step = rnd.randint(1, args.steps)
            group = rnd.randrange(groups_per_step)
            t1, _ = timed(http, f"{base}/steps/{step}/groups", {"offset": group // 50 * 50})
            t2, body = timed(http, f"{base}/steps/{step}/groups/{group}/answers")
            answer = rnd.randrange(len(body["answers"]))
            t3, _ = timed(http, f"{base}/steps/{step}/groups/{group}/answers/{answer}/tokens")
            times["step_view"].append(t1 + t2 + t3)
            for by in ANSWER_ORDERS:
                t, _ = timed(http, f"{base}/answers", {"by": by, "limit": 50})
                times["run_filter"].append(t)
            t, _ = timed(http, f"{base}/answers", {"contains": f"answer {rnd.randrange(99)} "})
            times["run_filter"].append(t)
            t, _ = timed(http, f"{base}/answers", {"zero_signal": True, "by": "length"})
            times["run_filter"].append(t)
            t, _ = timed(http, f"{base}/zero-signal-groups")
            times["run_filter"].append(t)
            for by in TOP_ORDERS:
                t, _ = timed(http, f"{base}/tokens", {"by": by, "offset": 100})
                times["token_ranking"].append(t)
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    runs_root = args.out
    dataset = runs_root / "synthetic-1m"
    built = build(dataset, args)
    num_tokens = 0
    for path in (dataset / "steps").glob("*.parquet"):
        num_tokens += int(pq.read_table(path, columns=["num_tokens"])["num_tokens"][0].as_py())
    port = free_port()
    env = {
        **os.environ,
        "GMTS_RUN_ROOTS": str(runs_root),
        "GMTS_SESSION_STATE_DIR": "",
        "PYTHONPATH": str(REPO),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(0.5)
        start_rss, _ = rss_mb(server.pid)
        health = Health(url)
        health.start()
        times = measure(url, "synthetic-1m", args)
        health.stop.set()
        health.join()
        rss, peak = rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(30)
    size = disk(dataset)
    report: dict[str, Any] = {
        "benchmark": "run_dataset_scale",
        "machine": machine(),
        "steps": args.steps,
        "rollouts": args.steps * args.answers,
        "tokens": num_tokens,
        **built,
        "disk_mb": size / 2**20,
        "disk_mb_per_million_tokens": size / 2**20 / (num_tokens / 1e6),
        "server_rss_start_mb": start_rss,
        "server_rss_mb": rss,
        "server_rss_peak_mb": peak,
        "healthz_max_s": max(health.times) if health.times else None,
        "healthz_count": len(health.times),
    }
    for kind, values in times.items():
        report[f"{kind}_p50_s"] = percentile(values, 0.5)
        report[f"{kind}_p95_s"] = percentile(values, 0.95)
        report[f"{kind}_count"] = len(values)
    return report


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    r = run(args)
    lines = [
        f"{r['rollouts']:,} rollouts, {r['tokens']:,} tokens in {r['steps']} steps; "
        f"{r['disk_mb']:.0f} MB on disk ({r['disk_mb_per_million_tokens']:.1f} MB per 1M tokens)",
        *(
            [f"writer: {r['write_tokens_per_s']:,.0f} tokens/s"]
            if "write_tokens_per_s" in r
            else []
        ),
        f"step view p50 {r['step_view_p50_s']:.3f} s, p95 {r['step_view_p95_s']:.3f} s",
        f"run-wide filter/ranking of answers p50 {r['run_filter_p50_s']:.3f} s, "
        f"p95 {r['run_filter_p95_s']:.3f} s",
        f"token ranking p50 {r['token_ranking_p50_s']:.3f} s, p95 {r['token_ranking_p95_s']:.3f} s",
        f"server RSS {r['server_rss_start_mb']:.0f} MB at start, "
        f"peak {r['server_rss_peak_mb']:.0f} MB",
        f"/healthz worst {r['healthz_max_s']:.3f} s over {r['healthz_count']} probes",
        f"load average {r['machine']['load_average_1m']}",
    ]
    emit(r, args.json, lines)


if __name__ == "__main__":
    main()
