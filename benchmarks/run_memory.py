"""Peak resident memory of `gmts analyze-run` over a generated multi-GB JSONL run.

Writes a run in the GMTS rollout JSONL format (one group per line: a demo-task prompt, 8
completions, their rewards, a ``step``, and a ``meta`` padding field that stands in for the
long completions of real dumps) to a temporary file of ``--gigabytes`` GB, then runs
``python -m app.cli analyze-run`` on it in a subprocess with ``--steps`` picking a few steps
spread over the whole file (so the reader streams through every byte: the index pass, then
each chosen step read from its offset), and samples the subprocess's resident set size every
50 ms (psutil). Target: peak RSS < 1 GB for a 2 GB run. The file is deleted afterwards.

    python benchmarks/run_memory.py                  # 2 GB, 5 analysed steps
    python benchmarks/run_memory.py --gigabytes 0.2 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from _common import emit, machine

GROUPS_PER_STEP = 4
COMPLETIONS = [
    " 7+8=15 carry 1, 4+3+1=8, answer 85",
    " 7+8=15 carry 1, 4+3+1=8, answer 86",
    " 7+8=14 carry 1, 4+3+1=8, answer 84",
    " 7+8=15, 4+3=7, answer 75",
]


def write_run(path: Path, size_bytes: int, padding: int, seed: int = 0) -> int:
    """Write lines until the file reaches ``size_bytes``; returns the number of steps."""
    rng = random.Random(seed)
    meta = "x" * padding
    written, line_no = 0, 0
    with path.open("w", encoding="utf-8") as f:
        while written < size_bytes:
            answers = [rng.choice(COMPLETIONS) for _ in range(8)]
            line = json.dumps(
                {
                    "step": line_no // GROUPS_PER_STEP,
                    "prompt": "Q: 47+38=?\nA:",
                    "completions": answers,
                    "rewards": [float(a.endswith("85")) for a in answers],
                    "meta": meta,
                }
            )
            f.write(line + "\n")
            written += len(line) + 1
            line_no += 1
    return (line_no + GROUPS_PER_STEP - 1) // GROUPS_PER_STEP


def peak_rss(cmd: list[str], env: dict[str, str]) -> tuple[int, float, int]:
    """(peak RSS bytes of the process tree, seconds, return code)."""
    start = time.monotonic()
    proc = psutil.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            try:
                procs = [proc, *proc.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs))
            except psutil.Error:
                pass
            done.wait(0.05)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, err = proc.communicate()
    done.set()
    thread.join()
    if proc.returncode:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    return peak, time.monotonic() - start, proc.returncode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gigabytes", type=float, default=2.0)
    p.add_argument("--padding", type=int, default=16_000, help="bytes of `meta` per line")
    p.add_argument("--analysed-steps", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="gmts-run-mem-") as tmp:
        run = Path(tmp) / "run.jsonl"
        t0 = time.monotonic()
        num_steps = write_run(run, int(args.gigabytes * 1e9), args.padding)
        write_s = time.monotonic() - t0
        stride = max(1, (num_steps - 1) // max(args.analysed_steps - 1, 1))
        steps = f"0:{num_steps - 1}:{stride}"
        env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "app.cli", "analyze-run", str(run), "-o",
               str(Path(tmp) / "out"), "--steps", steps, "--device", "cpu"]  # fmt: skip
        peak, seconds, code = peak_rss(cmd, env)
        report_rows = 0
        if code == 0:
            report_rows = len(json.loads((Path(tmp) / "out" / "report.json").read_text())["rows"])
        size = run.stat().st_size
    report = {
        "benchmark": "run_memory",
        "file_bytes": size,
        "run_steps": num_steps,
        "analysed_steps": report_rows,
        "peak_rss_bytes": peak,
        "peak_rss_mb": round(peak / 2**20, 1),
        "analyze_run_seconds": round(seconds, 1),
        "write_seconds": round(write_s, 1),
        "target_met": code == 0 and peak < 2**30,
        "machine": machine(),
    }
    emit(
        report,
        args.json,
        [
            f"run file: {size / 1e9:.2f} GB, {num_steps} steps; analysed {report_rows} steps",
            f"analyze-run peak RSS: {report['peak_rss_mb']} MB (target < 1024 MB): "
            f"{'met' if report['target_met'] else 'NOT met'}",
            f"analyze-run wall time: {seconds:.1f} s (file written in {write_s:.1f} s)",
        ],
    )
    sys.exit(0 if report["target_met"] else 1)


if __name__ == "__main__":
    main()
