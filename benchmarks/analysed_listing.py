"""Listing many analysed runs: the first scan (in the background, in reading processes) and
every listing after it (stats only: each run's manifest and steps folder).

    python benchmarks/analysed_listing.py                     # 1,000 runs x 100 steps
    python benchmarks/analysed_listing.py --runs 50 --steps 4 --json   # a smoke run

The runs are one real analysed run (the format's own writer, 4 groups x 4 answers a step)
hard-linked ``--runs`` times into one run root, so the root costs the disk of one run. The
service is the server's own (``app.services.analysed_runs``), built from default settings
with that root. Printed: the first scan's wall time (listing until every run is ready), then
the median and worst of ``--repeats`` listings after it, and the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from app.core.config import Settings  # noqa: E402
from app.services.container import build_services  # noqa: E402
from gmts_core.run_dataset.schema import write_manifest  # noqa: E402
from gmts_core.run_dataset.synthetic import synthetic_step  # noqa: E402
from gmts_core.run_dataset.writer import write_step  # noqa: E402


def build_root(root: Path, runs: int, steps: int) -> None:
    template = root.parent / "template"
    write_manifest(template, ("entropy", "gmts"), {})
    rng = np.random.default_rng(0)
    for step in range(1, steps + 1):
        write_step(template, synthetic_step(step, 4, 4, rng, median_length=12))
    for i in range(runs):
        dest = root / f"run-{i:05d}"
        for folder, _, files in os.walk(template):
            out = dest / Path(folder).relative_to(template)
            out.mkdir(parents=True, exist_ok=True)
            for name in files:
                os.link(Path(folder) / name, out / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        root.mkdir()
        build_root(root, args.runs, args.steps)
        settings = Settings(run_roots=[root], ui_enabled=False, run_list_wait_s=600)
        services = build_services(settings)
        service = services.analysed_runs
        start = time.perf_counter()
        first = service.list_runs()
        first_s = time.perf_counter() - start
        ready = sum(r.state == "ready" and r.readable for r in first.runs)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            again = service.list_runs()
            times.append(time.perf_counter() - start)
        assert again == first
        service.close()
    out = {
        "benchmark": "analysed_listing",
        "runs": args.runs,
        "steps_per_run": args.steps,
        "ready_after_first_scan": ready,
        "first_scan_s": round(first_s, 2),
        "listing_median_s": round(statistics.median(times), 4),
        "listing_max_s": round(max(times), 4),
        "load_average_1min": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
