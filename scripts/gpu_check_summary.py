"""Write the Markdown summary of ``scripts/gpu_check.sh``: environment, tests, benchmark.

    python scripts/gpu_check_summary.py RESULTS_DIR TESTS_EXIT_CODE BENCH_EXIT_CODE

Reads environment.txt, pytest-gpu.xml and token_stats_*.json from RESULTS_DIR and writes
RESULTS_DIR/summary.md (also printed), ready to paste into the README.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def tests_line(out: Path, exit_code: int) -> str:
    try:
        root = ET.parse(out / "pytest-gpu.xml").getroot()
        suite = root if root.tag == "testsuite" else root[0]
    except (OSError, ET.ParseError, IndexError) as exc:
        return f"- tests marked gpu: no report ({exc}; exit {exit_code})"
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    return (
        f"- tests marked gpu: {passed} passed, {n['failures']} failed, {n['errors']} errors, "
        f"{n['skipped']} skipped (exit {exit_code})"
    )


def _fmt(value: Any, scale: float = 1.0, digits: int = 3) -> str:
    return f"{value / scale:.{digits}f}" if isinstance(value, (int, float)) else "-"


def benchmark_table(report: dict[str, Any]) -> list[str]:
    """One table per benchmark report (the JSON of benchmarks/token_stats.py --json)."""
    variants: dict[str, dict[str, Any]] = report.get("variants", {})
    lse = variants.get("logsumexp", {}).get("time_s")
    lines = [
        f"Logits {tuple(report.get('shape', []))} {report.get('dtype')} on "
        f"{report.get('device')}, chunk {report.get('chunk_size')}, "
        f"best of {report.get('repeats')}:",
        "",
        "| variant | time (s) | x logsumexp | peak extra memory (MiB) |",
        "|---|---|---|---|",
    ]
    for name, r in variants.items():
        ratio = r["time_s"] / lse if lse and isinstance(r.get("time_s"), float) else None
        lines.append(
            f"| {name} | {_fmt(r.get('time_s'), digits=4)} | {_fmt(ratio, digits=2)} | "
            f"{_fmt(r.get('peak_extra_bytes'), 2**20, 1)} |"
        )
    lines += ["", f"Targets met: {json.dumps(report.get('targets_met'))}", ""]
    return lines


def main(argv: list[str]) -> None:
    out, tests_rc, bench_rc = Path(argv[0]), int(argv[1]), int(argv[2])
    env = (out / "environment.txt").read_text().splitlines()
    lines = ["## GPU check", "", *(f"- {line}" for line in env), tests_line(out, tests_rc), ""]
    reports = sorted(out.glob("token_stats_*.json"))
    lines += ["### Token statistics benchmark", ""]
    for path in reports:
        try:
            lines += benchmark_table(json.loads(path.read_text().strip().splitlines()[-1]))
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            lines += [f"{path.name}: no result ({exc}); see {path.stem}.txt", ""]
    if not reports:
        lines.append(f"No benchmark result (exit {bench_rc}).")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
