"""A run-wide analysed-run query whose client goes away is stopped: the server cancels the
request's job and its reading process is killed at once (seen: the lane's pool counts the
worker killed and the reading ended), not when the query would have finished."""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa

from app.main import create_app
from gmts_core.run_dataset import steps_index
from gmts_core.run_dataset.schema import TABLES, schema, step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import _write, write_step
from tests.app.api_helpers import LiveServer, make_settings
from tests.patience import PATIENCE_S

METHODS = ("entropy", "gmts", "random")


def slow_run(run: Path, steps: int) -> None:
    """A 3-method run whose steps 2.. are hard links of step 1's files (their own summaries):
    another pair's disagreement reads every token of every step, seconds of work."""
    write_manifest(run, METHODS, {})
    rng = np.random.default_rng(0)
    cols = synthetic_step(1, 200, 16, rng, median_length=60)
    pick = rng.random(len(cols.gamma)) < 0.3
    write_step(
        run, dataclasses.replace(cols, methods=METHODS, selected={**cols.selected, "random": pick})
    )
    first = steps_index.read_row(run, 1)
    for step in range(2, steps + 1):
        for table in TABLES:
            if table != "steps":
                os.link(step_file(run, table, 1), step_file(run, table, step))
        row = {**first, "step": step}
        _write(
            pa.Table.from_pylist([row], schema=schema("steps", METHODS)),
            step_file(run, "steps", step),
        )


def test_a_run_wide_query_whose_client_went_away_is_killed(tmp_path: Path) -> None:
    slow_run(tmp_path / "runs" / "slow", 60)
    settings = make_settings(
        tmp_path / "models", run_roots=[tmp_path / "runs"], ui_enabled=False,
        analysed_query_timeout_s=600, run_list_wait_s=60,
    )  # fmt: skip
    with LiveServer(create_app(settings)) as live:
        services = live.app.state.services
        lane = services.analysed_runs._lanes["run"]
        assert httpx.get(live.url + "/v1/analysed-runs/slow/steps", timeout=300).status_code == 200
        query = "/v1/analysed-runs/slow/answers?by=disagreement&pair=entropy,random"
        with socket.create_connection(("127.0.0.1", live.port), timeout=PATIENCE_S) as sock:
            sock.sendall(f"GET {query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            with lane.changed:  # a reading process is answering it
                assert lane.changed.wait_for(lambda: lane.reading.get("analysed") == 1, 120)
        with lane.changed:  # the client is gone: the reading ended, its process killed
            assert lane.changed.wait_for(lambda: lane.reading.get("analysed") == 0, 120)
        assert lane.killed == 1
        ok = httpx.get(live.url + "/v1/analysed-runs/slow/answers?by=reward&limit=1", timeout=300)
        assert ok.status_code == 200, ok.text  # the lane serves the next query
