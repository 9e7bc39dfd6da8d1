"""An analysed run at real scale, with realistic texts: write a dataset of a million rollouts,
serve it, and time what the Runs tab asks for, in wall and CPU seconds.

    python benchmarks/run_dataset_scale.py --out /work/data/realistic_1m --jobs 2
    python benchmarks/run_dataset_scale.py --steps 2 --answers 256 --rounds 2 --json  # smoke

The dataset (128 steps x 512 prompts x 16 answers: gmts_core.run_dataset.realistic — answer
lengths log-normal, median 156 and mean 236 tokens, up to 4,096; a BPE-like vocabulary of
30,000 strings with Zipf-Mandelbrot frequencies; 37% zero-signal groups; ~247M tokens) is
written with the writer `gmts analyze-run` uses, into ``--out`` (kept: a later call reuses it,
or writes only the steps it lacks). ``--short-texts`` writes the old 30-character answers.
Then ``gmts serve`` runs as a separate process with the dataset's folder under
GMTS_RUN_ROOTS, and one client asks, in turn:

- step views: a page of a random step's groups, one group's answers, one answer's tokens;
- run-wide rankings of answers by each order (and one at a random offset up to 500,000);
- filters: zero-signal answers ranked by length, a page of zero-signal groups;
- text searches: a frequent word, a word piece, a rare word, two phrases;
- tokens ranked by each order;

each timed in wall seconds and in CPU seconds of the server and its reading processes (load
independent), while a second client asks /healthz every 0.2 s. Then the contention figure:
step views while 3 other clients ask run-wide rankings, filters and searches without pause.
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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq
from _common import emit, free_port, machine, percentile

from gmts_core.run_dataset import ANSWER_ORDERS, TOP_ORDERS, write_step
from gmts_core.run_dataset.realistic import realistic_step, vocabulary
from gmts_core.run_dataset.schema import step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import reindex as writer_reindex

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--answers", type=int, default=8192, help="Answers per step.")
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument(
        "--short-texts",
        action="store_true",
        help="The old synthetic data (30-character answers, median 70 tokens) instead of "
        "realistic texts.",
    )
    p.add_argument("--jobs", type=int, default=1, help="Processes writing steps.")
    p.add_argument("--rounds", type=int, default=20, help="Rounds of every query kind.")
    p.add_argument("--out", type=Path, default=Path("/tmp/gmts-scale-runs"))
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--reindex",
        action="store_true",
        help="Before serving, give a dataset written before the word index's postings its "
        "postings files and answers row groups (gmts_core.run_dataset.writer.reindex).",
    )
    return p.parse_args(argv)


def reindex(root: Path, jobs: int) -> float:
    """Every step of ``root`` reindexed (:func:`~gmts_core.run_dataset.writer.reindex`);
    the seconds it took."""
    steps = sorted(int(p.stem.split("_")[1]) for p in (root / "answers").glob("step_*.parquet"))
    start = time.perf_counter()
    with ProcessPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(writer_reindex, [root] * len(steps), steps))
    return time.perf_counter() - start


def write_one(root: Path, step: int, args: argparse.Namespace) -> tuple[int, float]:
    """Write step ``step`` (its own seed: steps can be written in any order, in parallel);
    (its tokens, the writer's seconds)."""
    rng = np.random.default_rng((0, step))
    groups = args.answers // args.group_size
    if args.short_texts:
        cols = synthetic_step(step, groups, args.group_size, rng)
    else:
        cols = realistic_step(step, groups, args.group_size, rng, vocabulary())
    start = time.perf_counter()
    write_step(root, cols)
    return len(cols.gamma), time.perf_counter() - start


def build(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write the dataset, or the steps it lacks when one of the same sizes is there (a
    generation that was stopped goes on); the writer's throughput over what it wrote."""
    sizes = {
        "steps": args.steps,
        "answers": args.answers,
        "group_size": args.group_size,
        "texts": "short" if args.short_texts else "realistic",
    }
    manifest = root / "dataset.json"
    if not (manifest.is_file() and json.loads(manifest.read_text())["settings"] == sizes):
        shutil.rmtree(root, ignore_errors=True)
        write_manifest(root, ("entropy", "gmts"), sizes)
    todo = [s for s in range(1, args.steps + 1) if not step_file(root, "steps", s).is_file()]
    if not todo:
        return {"reused": True}
    start = time.perf_counter()
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(write_one, [root] * len(todo), todo, [args] * len(todo)))
    tokens, write_s = sum(d[0] for d in done), sum(d[1] for d in done)
    return {
        "reused": False,
        "steps_written": len(todo),
        "write_tokens_per_s": tokens / write_s,
        "write_s": write_s,
        "generate_wall_s": time.perf_counter() - start,
    }


def disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and every descendant, the children it
    has reaped included: the server and its reading processes."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        own = int(fields[11]) + int(fields[12])
        times[int(entry)] = (
            own + (int(fields[13]) + int(fields[14]) if int(entry) == pid else 0)
        ) / tick
    total, stack = 0.0, [pid]
    while stack:
        p = stack.pop()
        total += times.get(p, 0.0)
        stack.extend(c for c, parent in parents.items() if parent == p)
    return total


class Health(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.times: list[float] = []

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
    if r.status_code != 200:
        raise QueryFailed(f"{r.status_code} {path} {params}: {r.text[:300]}")
    return seconds, r.json()


class QueryFailed(RuntimeError):
    pass


# what a researcher searches for: a frequent word, a word piece, rarer words (one word each:
# answered by the word index alone) and phrases (the index's candidates, their texts checked)
SEARCHES = ("the", "ber", "zufi", "therefore")
PHRASES = ("total of the", "answer, ")


def run_wide(rnd: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """One round of run-wide queries: (kind, path under the run, parameters)."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for by in ANSWER_ORDERS:
        out.append(("ranking", "/answers", {"by": by, "limit": 50}))
    out.append(("ranking", "/answers", {"by": "reward", "offset": rnd.randrange(500_000)}))
    out.append(("filter", "/answers", {"zero_signal": True, "by": "length"}))
    out.append(("filter", "/zero-signal-groups", {"offset": rnd.randrange(100)}))
    for q in SEARCHES:
        out.append(("text_search", "/answers", {"contains": q, "by": "reward"}))
    for q in PHRASES:
        out.append(("phrase_search", "/answers", {"contains": q, "by": "reward"}))
    for by in TOP_ORDERS:
        out.append(("token_ranking", "/tokens", {"by": by, "offset": 100}))
    return out


def step_view(http: httpx.Client, base: str, rnd: random.Random, args: argparse.Namespace) -> float:
    """A random step's page of groups, one group's answers, one answer's first tokens."""
    step = rnd.randint(1, args.steps)
    group = rnd.randrange(args.answers // args.group_size)
    t1, _ = timed(http, f"{base}/steps/{step}/groups", {"offset": group // 50 * 50})
    t2, body = timed(http, f"{base}/steps/{step}/groups/{group}/answers")
    answer = rnd.randrange(len(body["answers"]))
    t3, _ = timed(http, f"{base}/steps/{step}/groups/{group}/answers/{answer}/tokens")
    return t1 + t2 + t3


def measure(url: str, pid: int, run_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """Alone: each query's wall and CPU seconds (the server's and its reading processes').
    Then the contention figure: step views while 3 other clients ask run-wide queries."""
    rnd = random.Random(0)
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    queries: list[dict[str, Any]] = []  # each run-wide query in order: what the p95s are made of
    failed: list[str] = []
    base = f"/v1/analysed-runs/{run_id}"
    with httpx.Client(base_url=url, timeout=120) as http:
        timed(http, f"{base}/steps")  # the run's first open
        for _ in range(args.rounds):
            before = tree_cpu_s(pid)
            wall.setdefault("step_view", []).append(step_view(http, base, rnd, args))
            cpu.setdefault("step_view", []).append(tree_cpu_s(pid) - before)
            for kind, path, params in run_wide(rnd):
                before = tree_cpu_s(pid)
                try:
                    t, _ = timed(http, base + path, params)
                except QueryFailed as exc:  # a limit (time, memory) reached: counted, shown
                    failed.append(str(exc))
                    continue
                used = tree_cpu_s(pid) - before
                wall.setdefault(kind, []).append(t)
                cpu.setdefault(kind, []).append(used)
                record = {"kind": kind, "path": path, "params": params, "s": t, "cpu_s": used}
                queries.append(record)
    busy = threading.Event()
    errors: list[str] = []

    def heavy(seed: int) -> None:
        r = random.Random(seed)
        with httpx.Client(base_url=url, timeout=120) as client:
            while not busy.is_set():
                kind, path, params = r.choice(
                    [q for q in run_wide(r) if q[0] in ("ranking", "text_search", "filter")]
                )
                got = client.get(base + path, params=params)
                if got.status_code not in (200, 429):
                    errors.append(f"{got.status_code} {path}")

    others = [threading.Thread(target=heavy, args=(i,), daemon=True) for i in range(3)]
    for thread in others:
        thread.start()
    contended: list[float] = []
    with httpx.Client(base_url=url, timeout=120) as http:
        for _ in range(args.rounds):
            contended.append(step_view(http, base, rnd, args))
    busy.set()
    for thread in others:
        thread.join()
    return {
        "wall": wall,
        "cpu": cpu,
        "queries": queries,
        "failed": failed,
        "contended": contended,
        "contention_errors": errors,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    runs_root = args.out
    dataset = runs_root / "synthetic-1m"
    built = build(dataset, args)
    if args.reindex:
        built["reindex_s"] = reindex(dataset, args.jobs)
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
        load_before = os.getloadavg()[0]
        got = measure(url, server.pid, "synthetic-1m", args)
        load_after = os.getloadavg()[0]
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
        "load_average_1m_before_after": [load_before, load_after],
        "texts": "short" if args.short_texts else "realistic",
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
        "contention_errors": got["contention_errors"][:5],
        "failed_queries": len(got["failed"]),
        "failed_examples": got["failed"][:5],
    }
    for kind, values in got["wall"].items():
        report[f"{kind}_p50_s"] = percentile(values, 0.5)
        report[f"{kind}_p95_s"] = percentile(values, 0.95)
        report[f"{kind}_cpu_p50_s"] = percentile(got["cpu"][kind], 0.5)
        report[f"{kind}_cpu_p95_s"] = percentile(got["cpu"][kind], 0.95)
        report[f"{kind}_count"] = len(values)
    report["step_view_contended_p50_s"] = percentile(got["contended"], 0.5)
    report["step_view_contended_p95_s"] = percentile(got["contended"], 0.95)
    report["queries"] = got["queries"]
    return report


KINDS = ("step_view", "ranking", "filter", "text_search", "phrase_search", "token_ranking")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    r = run(args)
    lines = [
        f"{r['rollouts']:,} rollouts, {r['tokens']:,} tokens in {r['steps']} steps "
        f"({r['texts']} texts); {r['disk_mb']:.0f} MB on disk",
        *(
            [f"writer: {r['write_tokens_per_s']:,.0f} tokens/s"]
            if "write_tokens_per_s" in r
            else []
        ),
        *(
            f"{kind}: p50 {r[kind + '_p50_s']:.3f} s, p95 {r[kind + '_p95_s']:.3f} s wall; "
            f"CPU p50 {r[kind + '_cpu_p50_s']:.3f} s, p95 {r[kind + '_cpu_p95_s']:.3f} s"
            for kind in KINDS
            if kind + "_p50_s" in r
        ),
        f"failed: {r['failed_queries']} {r['failed_examples']}",
        f"step view while 3 clients run run-wide queries: p50 "
        f"{r['step_view_contended_p50_s']:.3f} s, p95 {r['step_view_contended_p95_s']:.3f} s",
        f"server RSS {r['server_rss_start_mb']:.0f} MB at start, "
        f"peak {r['server_rss_peak_mb']:.0f} MB",
        f"/healthz worst {r['healthz_max_s']:.3f} s over {r['healthz_count']} probes",
        f"load average before/after {r['load_average_1m_before_after']}",
    ]
    emit(r, args.json, lines)


if __name__ == "__main__":
    main()
