"""A long analysed run (12,288 steps): what listing it, opening it, starting the server with it
and keeping a tab open on it cost, now that every step's summary is in one steps index.

    python benchmarks/long_run.py --out /work/data/long_run            # 12,288 steps
    python benchmarks/long_run.py --steps 50 --repeats 2 --json        # a smoke run

The run (kept in ``--out``, reused) is the format's own writer's: step 1 written whole by
``write_step`` (4 groups x 4 answers), every later step's summary file written by the same
code path's table and appended to the steps index (``steps.jsonl``), and its tokens, answers,
top and words files hard links of step 1's (listing, charts, startup and polls read only the
summaries). Then ``gmts serve`` (UI on) is started ``--repeats`` times with an empty run root
and with this one, timed to its first ``/healthz``; with the run: the first listing until the
run is ready (the first scan), listings after it, ``/steps`` (time and bytes), and the Runs
tab's idle poll (``GET /v1/analysed-runs/{id}``, asked every 5 s by an open tab): its wall and
CPU seconds (the server's and its reading processes'), and so the share of a core an idle tab
costs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
from _common import emit, free_port, machine, median
from run_dataset_scale import REPO, tree_cpu_s

from gmts_core.run_dataset import steps_index
from gmts_core.run_dataset.schema import TABLES, schema, step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import _write, write_step

POLL_S = 5.0  # the Runs tab's poll (app.ui.tabs.runs.analysed.POLL_S)


def build(run: Path, steps: int) -> None:
    if (run / "dataset.json").is_file() and step_file(run, "steps", steps).is_file():
        return
    write_manifest(run, ("entropy", "gmts"), {"steps": steps})
    write_step(run, synthetic_step(1, 4, 4, np.random.default_rng(0), median_length=12))
    first = steps_index.read_row(run, 1)
    rng = np.random.default_rng(1)
    for step in range(2, steps + 1):
        for table in TABLES:
            if table != "steps" and not step_file(run, table, step).exists():
                os.link(step_file(run, table, 1), step_file(run, table, step))
        row = {**first, "step": step, "reward_mean": float(rng.random())}
        table = pa.Table.from_pylist([row], schema=schema("steps", ("entropy", "gmts")))
        _write(table, step_file(run, "steps", step))
        steps_index.append(run, step, row)


def start(root: Path, ui: bool = True) -> tuple[subprocess.Popen[bytes], str, float]:
    port = free_port()
    env = {
        **os.environ,
        "GMTS_UI_ENABLED": "true" if ui else "false",
        "GMTS_RUN_ROOTS": str(root),
        "GMTS_SESSION_STATE_DIR": "",
        "PYTHONPATH": str(REPO),
    }
    begin = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return server, url, time.perf_counter() - begin
        except httpx.HTTPError:
            pass
        if server.poll() is not None:
            raise SystemExit("the server did not start")
        time.sleep(0.05)


def stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    server.wait(30)


def measure(root: Path, run_id: str, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    base = f"/v1/analysed-runs/{run_id}"
    if args.empty_start:
        with tempfile.TemporaryDirectory() as empty:
            server, _, out["ready_empty_s"] = start(Path(empty), args.ui)
            stop(server)
    server, url, ready = start(root, args.ui)
    out["ready_with_run_s"] = ready
    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            begin = time.perf_counter()
            while True:
                runs = http.get("/v1/analysed-runs").json()["runs"]
                if runs and runs[0].get("state") == "ready":
                    break
                time.sleep(0.05)
            out["first_scan_s"] = time.perf_counter() - begin
            listings = []
            for _ in range(10):
                t = time.perf_counter()
                http.get("/v1/analysed-runs").raise_for_status()
                listings.append(time.perf_counter() - t)
            out["listing_median_s"], out["listing_max_s"] = median(listings), max(listings)
            t = time.perf_counter()
            body = http.get(f"{base}/steps")
            out["steps_s"], out["steps_bytes"] = time.perf_counter() - t, len(body.content)
            out["num_steps"] = len(body.json()["steps"])
            polls, cpu = [], tree_cpu_s(server.pid)
            for _ in range(args.polls):
                t = time.perf_counter()
                http.get(base).raise_for_status()
                polls.append(time.perf_counter() - t)
            per_poll = (tree_cpu_s(server.pid) - cpu) / args.polls
            out["poll_median_s"], out["poll_cpu_s"] = median(polls), per_poll
            out["idle_tab_core_share"] = per_poll / POLL_S
    finally:
        stop(server)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12_288)
    p.add_argument("--polls", type=int, default=40)
    p.add_argument("--repeats", type=int, default=1, help="Server starts of each kind.")
    p.add_argument("--out", type=Path, default=Path("/tmp/gmts-long-run"))
    p.add_argument("--no-ui", dest="ui", action="store_false", help="Serve the API only.")
    p.add_argument(
        "--no-empty-start",
        dest="empty_start",
        action="store_false",
        help="Skip the server start with an empty run root (no comparison).",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    root = args.out / "runs"
    begin = time.perf_counter()
    build(root / "long-run", args.steps)
    build_s = time.perf_counter() - begin
    rounds = [measure(root, "long-run", args) for _ in range(args.repeats)]
    r: dict[str, Any] = {
        "benchmark": "long_run",
        "machine": machine(),
        "steps": args.steps,
        "ui": args.ui,
        "build_s": build_s,
        **{k: median([x[k] for x in rounds]) for k in rounds[0]},
    }
    if args.empty_start:
        r["ready_extra_s"] = median([x["ready_with_run_s"] - x["ready_empty_s"] for x in rounds])
    lines = [
        f"{r['num_steps']:,} steps; server ready {r['ready_with_run_s']:.2f} s"
        + (
            f" (empty root {r['ready_empty_s']:.2f} s, {r['ready_extra_s']:+.2f} s)"
            if args.empty_start
            else ""
        ),
        f"first scan {r['first_scan_s']:.2f} s; listing after it median "
        f"{r['listing_median_s']:.3f} s, worst {r['listing_max_s']:.3f} s",
        f"/steps {r['steps_s']:.2f} s, {r['steps_bytes'] / 1e6:.1f} MB",
        f"idle poll {r['poll_median_s'] * 1000:.1f} ms, {r['poll_cpu_s'] * 1000:.1f} CPU-ms: "
        f"{100 * r['idle_tab_core_share']:.2f}% of a core at one poll per {POLL_S:g} s",
        f"load average {r['machine']['load_average_1m']}",
    ]
    emit(r, args.json, lines)


if __name__ == "__main__":
    main()
