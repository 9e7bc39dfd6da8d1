"""Write tests/file_seconds.json, each test file's seconds, from pytest's durations report.

    .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=0 > durations.log
    PYTHONPATH=. .venv/bin/python scripts/file_seconds.py durations.log

Sums every phase (setup, call, teardown) of a file's tests: the time the file holds one
worker. tests/file_order.py hands the longest files out first.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from tests.file_order import SECONDS_FILE, file_of

# "164.89s call     tests/benchmarks/test_rl_gain.py::test_thirty_steps" in pytest's report
DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(\S.*)$")


def file_seconds(report: str) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        if match := DURATION.match(line):
            seconds[file_of(match[2])] += float(match[1])
    return {name: round(total, 1) for name, total in sorted(seconds.items())}


def main(report_path: str) -> None:
    seconds = file_seconds(Path(report_path).read_text())
    if not seconds:
        sys.exit(f"{report_path}: no durations (run pytest with --durations=0)")
    SECONDS_FILE.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{SECONDS_FILE}: {len(seconds)} files, {sum(seconds.values()):.0f} s in all")


if __name__ == "__main__":
    main(*sys.argv[1:])
