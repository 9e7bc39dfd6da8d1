"""The reading processes' pool starts its workers off the requests' clock: one asked for in
advance (``prestart``) answers the next request without another start, a worker that retires
(resident past ``retire_mb``) has its successor started in the background, and a preload entry
``module:function`` runs that function before the worker says it is ready. Real processes,
real run files; every wait is on the pool's condition, never a sleep."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gmts_core.runs.limits import RunLimits
from gmts_core.runs.worker import ReaderPool, RunWorkerLimitError, WorkerLimits

DATA = Path(__file__).resolve().parents[2] / "data" / "runs" / "verl"
WAIT_S = 120.0  # a start on a loaded 2-core machine (importing pyarrow)


def _wait(pool: ReaderPool, started: int) -> None:
    """Until ``started`` workers have started and one waits idle (or fail after WAIT_S)."""
    with pool.changed:
        assert pool.changed.wait_for(
            lambda: pool.started >= started and bool(pool._idle), timeout=WAIT_S
        ), (pool.started, len(pool._idle))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    shutil.copytree(DATA, tmp_path / "verl")
    return tmp_path / "verl"


def test_a_prestarted_worker_answers_the_first_request(run: Path) -> None:
    pool = ReaderPool(2, WorkerLimits())
    try:
        pool.prestart()
        pool.prestart()  # one being started: no second
        _wait(pool, 1)
        opened = pool.open_run(run, RunLimits())
        assert opened.refs and pool.started == 1  # no start on the request's clock
    finally:
        pool.close()


def test_a_retired_workers_successor_starts_in_the_background(run: Path) -> None:
    pool = ReaderPool(1, WorkerLimits(retire_mb=1))  # every worker retires after a reading
    try:
        first = pool.open_run(run, RunLimits())
        assert pool.started == 1
        _wait(pool, 2)  # the successor, started with no request waiting
        second = pool.open_run(run, RunLimits())
        assert pool.started == 2 and second.refs == first.refs
        _wait(pool, 3)
    finally:
        pool.close()
    assert not pool._idle


def test_a_preload_function_runs_before_the_worker_is_ready(run: Path) -> None:
    warm = WorkerLimits(preload=("gmts_core.run_dataset.requests:warm",))
    pool = ReaderPool(1, warm)
    try:
        assert pool.open_run(run, RunLimits()).refs
    finally:
        pool.close()
    broken = ReaderPool(1, WorkerLimits(preload=("gmts_core.run_dataset.requests:no_such",)))
    broken.prestart()  # fails in the background: a request then starts its own, never hangs
    with pytest.raises(RunWorkerLimitError, match="ended the reading process"):
        broken.open_run(run, RunLimits())
    assert not broken._starting and not broken._idle
    broken.close()
