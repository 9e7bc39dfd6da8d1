"""Run files are parsed in worker processes under hard limits (``GMTS_RUN_WORKER_*``), through
a real uvicorn server: a reading past its wall time, its CPU seconds or its address space is
killed, the request answers a 413 naming the setting, the job slot is free for the next
request and the next reading gets a fresh worker; a reading whose client went away is
killed too. The slow file is real work (a verl line of millions of JSON values, each one
validated), not a stub: its reading takes seconds where the limits here are a fraction.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.app.api_helpers import LiveServer, make_settings
from tests.patience import PATIENCE_S

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
LINE_BYTES = 64 << 20  # the slow line fits the line budget raised to this


def slow_line(path: Path, piece: bytes, count: int) -> None:
    """A verl step of one line whose extra column ``pad`` holds ``count`` x ``piece``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(b'{"input": "Q", "output": " 2", "score": 1, "pad": [')
        block = piece * 1_000_000
        for _ in range(count // 1_000_000):
            f.write(block)
        f.write(b"0]}\n")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("worker_runs")
    shutil.copytree(DATA / "verl", path / "verl")
    slow_line(path / "slow" / "1.jsonl", b"0,", 30_000_000)  # 60 MB: 30 M numbers
    slow_line(path / "fat" / "1.jsonl", b"[],", 20_000_000)  # 60 MB: 20 M lists
    return path


def serve(tmp: Path, root: Path, **overrides: Any) -> LiveServer:
    values: dict[str, Any] = dict(
        run_roots=[root],
        run_max_line_bytes=LINE_BYTES,
        run_max_step_bytes=LINE_BYTES,
        run_list_wait_s=60,
    )
    values.update(overrides)
    return LiveServer(create_app(make_settings(tmp, **values)))


def refused(live: LiveServer, path: str, setting: str) -> None:
    resp = httpx.get(live.url + path, timeout=300)
    assert resp.status_code == 413, resp.text
    assert setting in resp.json()["error"]["message"], resp.text
    # the server is up, the job slot free, the next reading served by a fresh worker
    assert httpx.get(live.url + "/healthz", timeout=PATIENCE_S).status_code == 200
    again = httpx.get(live.url + "/v1/runs/verl", timeout=300)
    assert again.status_code == 200, again.text
    services = live.app.state.services
    assert services.jobs.running == 0
    assert services.runs.readers.killed >= 1


def test_a_reading_past_its_wall_time_is_killed_and_frees_the_slot(
    tmp_path: Path, root: Path
) -> None:
    with serve(tmp_path, root, run_worker_wall_s=0.5) as live:
        refused(live, "/v1/runs/slow/steps/1", "GMTS_RUN_WORKER_WALL_S")


def test_a_reading_past_its_cpu_seconds_is_killed(tmp_path: Path, root: Path) -> None:
    with serve(tmp_path, root, run_worker_cpu_s=1, run_worker_wall_s=600) as live:
        refused(live, "/v1/runs/slow/steps/1", "GMTS_RUN_WORKER_CPU_S")


def test_a_reading_past_its_address_space_is_killed(tmp_path: Path, root: Path) -> None:
    # 20 M empty lists need more than a GB of Python objects
    with serve(tmp_path, root, run_worker_memory_mb=768, run_worker_wall_s=600) as live:
        refused(live, "/v1/runs/fat/steps/1", "GMTS_RUN_WORKER_MEMORY_MB")


def test_a_reading_whose_client_went_away_is_killed(tmp_path: Path, root: Path) -> None:
    """The client closes its connection while the step is being read: the server cancels
    the job, and the waiting caller kills the worker at once (not at the end of its reading)."""
    with serve(tmp_path, root, run_worker_wall_s=600) as live:
        services = live.app.state.services
        jobs = services.jobs
        with socket.create_connection(("127.0.0.1", live.port), timeout=PATIENCE_S) as sock:
            sock.sendall(b"GET /v1/runs/slow/steps/1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            readers = services.runs.readers
            with readers.changed:  # a worker is reading the step
                assert readers.changed.wait_for(lambda: readers.reading.get("load") == 1, 60)
        with jobs._changed:
            assert jobs._changed.wait_for(lambda: jobs.stopped >= 1 and jobs.running == 0, 60)
        assert services.runs.readers.killed >= 1
        assert httpx.get(live.url + "/v1/runs/verl", timeout=300).status_code == 200


def test_a_reading_in_a_worker_gives_the_same_step_as_the_reader(root: Path) -> None:
    """The step that crosses the pipe (JSON) is the reader's own, field for field."""
    import dataclasses
    import os

    from gmts_core.runs import RunLimits, open_run
    from gmts_core.runs.worker import ReaderPool, WorkerLimits

    pool = ReaderPool(1, WorkerLimits())
    data = os.path.realpath(DATA)
    try:
        for name in ("verl", "trl", "logged", "roll", "areal", "run.jsonl"):
            limits = RunLimits(root=data)
            remote = pool.open_run(Path(data) / name, limits)
            local = open_run(Path(data) / name, limits=limits)
            assert remote.format == local.format and remote.refs == local.refs
            for number in local.steps:
                got, want = remote.step(number), local.step(number)
                assert json.dumps(dataclasses.asdict(got), default=str) == json.dumps(
                    dataclasses.asdict(want), default=str
                ), name
    finally:
        pool.close()


def rss_mb() -> float:
    """This process's resident memory now (the server runs in it), in MB."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def map_bomb(path: Path, rows: int = 16_000, per_row: int = 1_000) -> None:
    """A TRL step whose ``meta`` map column holds one 10,000-character key and value,
    dictionary-encoded, ``per_row`` times per row: a few KB of file, 320 GB decoded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = rows * per_row
    text = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), ["x" * 10_000])
    offsets = pa.array(np.arange(0, n + 1, per_row, dtype=np.int32))
    table = pa.table(
        {
            "prompt": ["Q"] * rows,
            "completion": [" 2"] * rows,
            "r": [1.0] * rows,
            "meta": pa.MapArray.from_arrays(offsets, text, text),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")


@pytest.mark.slow
def test_a_tiny_parquet_bomb_leaves_the_servers_memory_as_it_was(tmp_path: Path) -> None:
    """Three concurrent requests for a few-KB step that decodes to 320 GB: each a 413, and
    the server process's resident memory within 200 MB of what it was before."""
    import concurrent.futures

    root = tmp_path / "runs"
    map_bomb(root / "bomb" / "completions" / "completions_00001.parquet")
    size = (root / "bomb" / "completions" / "completions_00001.parquet").stat().st_size
    assert size < 10_000
    with serve(tmp_path, root) as live:
        assert httpx.get(live.url + "/healthz", timeout=PATIENCE_S).status_code == 200
        before = rss_mb()

        def fetch(_: int) -> httpx.Response:
            return httpx.get(live.url + "/v1/runs/bomb/steps/1", timeout=600)

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(fetch, range(3)))
        after = rss_mb()
        print(f"file {size} bytes; server RSS {before:.0f} -> {after:.0f} MB")  # noqa: T201
        for resp in answers:
            assert resp.status_code == 413, resp.text
            assert "max_step_bytes" in resp.json()["error"]["message"]
        assert after - before < 200


def test_a_reading_process_gets_none_of_the_servers_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gmts_core.runs.worker import _child_env

    monkeypatch.setenv("GMTS_API_KEY", "s3cret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    assert "s3cret" not in _child_env().values()
