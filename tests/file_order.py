"""The order test files are handed to the workers: longest first.

`make test` runs `pytest -n 2 --dist loadfile`: each file goes whole to one worker, and files
are handed out in collection order as workers free up. In path order the longest files (the
docs' snippets, the benchmarks' smoke tests) came last, so one worker ran them alone while the
other sat idle. Handing out the longest first (the longest-processing-time rule) lets the short
files fill the gaps instead.

`tests/file_seconds.json` holds each file's seconds on one worker, from a measured run
(`scripts/file_seconds.py` writes it from pytest's `--durations=0` report). A file not in it (a
new one) goes first: a short file early costs nothing, a long one late is the tail. The order
only changes speed: every test still runs, and the tests of one file keep their order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

SECONDS_FILE = Path(__file__).with_name("file_seconds.json")


class _Item(Protocol):
    @property
    def nodeid(self) -> str: ...


Item = TypeVar("Item", bound=_Item)


def file_of(nodeid: str) -> str:
    """The file a test's node id names (`tests/x.py::name[param]` -> `tests/x.py`)."""
    return nodeid.split("::", 1)[0]


def recorded_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    return {name: float(seconds) for name, seconds in json.loads(path.read_text()).items()}


def longest_first(items: Sequence[Item], seconds: dict[str, float]) -> list[Item]:
    """The items with whole files in decreasing recorded seconds (unrecorded files first).

    Stable: the tests of a file keep their order, and files of equal seconds their path order.
    """
    first_seen = {file_of(item.nodeid): index for index, item in reversed(list(enumerate(items)))}

    def key(item: Item) -> tuple[float, int]:
        name = file_of(item.nodeid)
        return (-seconds.get(name, float("inf")), first_seen[name])

    return sorted(items, key=key)
