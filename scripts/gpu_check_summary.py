"""Write the Markdown summary of ``scripts/gpu_check.sh``: environment, tests, benchmarks.

    python scripts/gpu_check_summary.py RESULTS_DIR TESTS_EXIT_CODE BENCH_EXIT_CODE

Reads environment.txt, pytest-gpu.xml, token_stats_*.json, sampler_*.json and real_size_*.json
from RESULTS_DIR and writes RESULTS_DIR/summary.md (also printed), ready to paste into
docs/benchmarks.md.
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


def fmt(value: Any, scale: float = 1.0, digits: int = 3) -> str:
    return f"{value / scale:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _spread(s: dict[str, float] | None, digits: int) -> str:
    """median [min-max] of a spread from the benchmark report."""
    if not s:
        return "-"
    return f"{fmt(s['median'], digits=digits)} [{fmt(s['min'], digits=digits)}-" + (
        f"{fmt(s['max'], digits=digits)}]"
    )


def token_stats_table(report: dict[str, Any]) -> list[str]:
    """The JSON of benchmarks/token_stats.py --json as a table: median [range] per variant."""
    lines = [
        f"Logits {tuple(report.get('shape', []))} {report.get('dtype')} on "
        f"{report.get('device')}, chunk {report.get('chunk_size')}, "
        f"{report.get('repeats')} interleaved repeats:",
        "",
        "| variant | time (s), median [range] | x chunked logsumexp | peak extra memory (MiB) |",
        "|---|---|---|---|",
    ]
    timing = next(iter(report.get("timing", {}).values()), {"wall_s": {}, "ratio": {}})
    memory = report.get("memory", {})
    for name in dict.fromkeys([*timing["wall_s"], *memory]):
        w, r = timing["wall_s"].get(name), timing["ratio"].get(name)
        time_s = (
            f"{fmt(w['median'], digits=4)} [{fmt(w['min'], digits=4)}-{fmt(w['max'], digits=4)}]"
            if w
            else "-"
        )  # noqa: E501
        ratio = (
            f"{fmt(r['median'], digits=2)} [{fmt(r['min'], digits=2)}-{fmt(r['max'], digits=2)}]"
            if r
            else "-"
        )  # noqa: E501
        mem = memory.get(name, {}).get("peak_extra_bytes")
        lines.append(f"| {name} | {time_s} | {ratio} | {fmt(mem, 2**20, 1)} |")
    lines += ["", f"Targets met: {json.dumps(report.get('targets_met'))}", ""]
    return lines


def real_size_table(report: dict[str, Any]) -> list[str]:
    """The JSON of benchmarks/real_size.py --json as a table."""
    lines = [
        f"{report.get('model')} ({fmt(report.get('parameters'), 1e6, 0)}M parameters), "
        f"{report.get('answers')} answers x {report.get('tokens_per_answer')} tokens, "
        f"{report.get('device')} {report.get('dtype')}, median of {report.get('repeats')}:",
        "",
        "| operation | time (s) | answer tokens/s | peak extra memory (MiB) |",
        "|---|---|---|---|",
    ]
    for name, seconds in report.get("median_s", {}).items():
        rate = fmt(report["answer_tokens_per_s"].get(name), digits=0)
        mem = fmt(report["peak_extra_mib"].get(name), digits=0)
        lines.append(f"| {name} | {fmt(seconds)} | {rate} | {mem} |")
    ratios = ", ".join(f"{k} {fmt(v, digits=2)}" for k, v in report.get("ratios", {}).items())
    lines += ["", f"Ratios: {ratios}. Targets met: {json.dumps(report.get('targets_met'))}", ""]
    return lines


def sampler_table(report: dict[str, Any]) -> list[str]:
    """The JSON of benchmarks/sampler.py --json as a table: median seconds per way."""
    med, ratios = report["median_s"], report["ratios"]
    lines = [
        f"{report['shape']} on {report['device']}: {report['rows']} rows x "
        f"{report['max_new_tokens']} tokens, served: {report['served']}",
        "",
        "| way | median (s) |",
        "|---|---|",
        *(f"| {name} | {fmt(value, digits=4)} |" for name, value in med.items()),
        "",
        f"fused / generate {fmt(ratios['fused_vs_generate'], digits=2)}, generic / generate "
        f"{fmt(ratios['generic_vs_generate'], digits=2)}; max log-prob difference sampler vs "
        f"forward {report['max_abs_logprob_diff_sampler_vs_forward']:.2e}",
        "",
    ]
    return lines


def _section(out: Path, pattern: str, title: str, table: Any) -> list[str]:
    lines = [f"### {title}", ""]
    reports = sorted(out.glob(pattern))
    for path in reports:
        try:
            lines += table(json.loads(path.read_text().strip().splitlines()[-1]))
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            lines += [f"{path.name}: no result ({exc}); see {path.stem}.txt", ""]
    if not reports:
        lines += ["No result.", ""]
    return lines


def main(argv: list[str]) -> None:
    out, tests_rc, bench_rc = Path(argv[0]), int(argv[1]), int(argv[2])
    env = (out / "environment.txt").read_text().splitlines()
    lines = ["## GPU check", "", *(f"- {line}" for line in env), tests_line(out, tests_rc), ""]
    lines += _section(out, "token_stats_*.json", "Token statistics", token_stats_table)
    lines += _section(out, "sampler_*.json", "KV-cached sampler vs generate", sampler_table)
    lines += _section(out, "real_size_*.json", "Real-size models", real_size_table)
    lines.append(f"Benchmarks exit status: {bench_rc}.")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
