"""Test files are handed to the workers longest first, whole and in their own order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.file_seconds import file_seconds
from tests.file_order import file_of, longest_first, recorded_seconds

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Item:
    nodeid: str


def test_files_go_longest_first_whole_and_unrecorded_ones_first() -> None:
    items = [
        Item("tests/a.py::one"),
        Item("tests/a.py::two"),
        Item("tests/b.py::one[x]"),
        Item("tests/new.py::one"),
        Item("tests/c.py::one"),
        Item("tests/b.py::one[y]"),
        Item("tests/c.py::two"),
    ]
    seconds = {"tests/a.py": 3.0, "tests/b.py": 40.0, "tests/c.py": 3.0}

    ordered = [item.nodeid for item in longest_first(items, seconds)]

    assert ordered == [
        "tests/new.py::one",
        "tests/b.py::one[x]",
        "tests/b.py::one[y]",
        "tests/a.py::one",
        "tests/a.py::two",
        "tests/c.py::one",
        "tests/c.py::two",
    ]


def test_this_session_collected_its_files_longest_first(request: pytest.FixtureRequest) -> None:
    seconds = recorded_seconds()
    files: list[str] = []
    for item in request.session.items:
        if not files or files[-1] != file_of(item.nodeid):
            assert file_of(item.nodeid) not in files, f"{item.nodeid}: its file was split"
            files.append(file_of(item.nodeid))
    order = [seconds.get(name, float("inf")) for name in files]
    assert order == sorted(order, reverse=True)


def test_every_recorded_file_exists() -> None:
    missing = [name for name in recorded_seconds() if not (ROOT / name).is_file()]
    assert missing == [], "rewrite tests/file_seconds.json (scripts/file_seconds.py)"


def test_the_durations_report_sums_every_phase_per_file() -> None:
    report = "\n".join(
        [
            "============================= slowest durations =============================",
            "164.89s call     tests/benchmarks/test_smoke.py::test_explore[a::b]",
            "36.47s setup    tests/benchmarks/test_smoke.py::test_quick",
            "0.50s teardown tests/test_docs.py::test_site",
            "(12 durations < 0.005s hidden.  Use -vv to show these durations.)",
            "= 2 passed in 3.00s =",
        ]
    )
    assert file_seconds(report) == {
        "tests/benchmarks/test_smoke.py": 201.4,
        "tests/test_docs.py": 0.5,
    }
