"""miles' Parquet mirror and the trainers' metrics logs (TRL trainer_state.json, verl's file
logger) against hostile input, through a real uvicorn server: a type nested past Arrow's depth,
a list bomb over the step budget, a log-prob that is not finite, a FIFO swapped in, a link out
of the root holding a secret, pickle files only; for the metrics logs nesting 100k deep, a
file over the step budget, a line over the line budget, a FIFO and a link out of the root. A
step answers a clean 4xx naming the reason; a run's overview answers 200 with
``trainer_metrics_error`` saying why its log was not read; never a 5xx, the secret never shown,
no reading process killed, the job queue free, /healthz answering and the server's resident
memory within 200 MB of its start (``get``)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.main import create_app
from tests.app.api.test_runs_hostile import (
    SECRET,
    STEP_BYTES,
    assert_line_free,
    get,
    hostile_settings,
    listing,
    message,
    warmed_up,
)
from tests.app.api_helpers import LiveServer

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
MIRROR = DATA / "miles" / "dashboard_columns" / "rollout_0.parquet"
PAYLOAD = b"cos\nsystem\n(S'touch pickle-was-loaded'\ntR."  # would run a command if unpickled


def miles_run(root: Path, name: str, table: pa.Table | None = None) -> Path:
    """The shipped miles run (its mirror and the dashboard's summaries), rollout 0's mirror
    replaced by ``table``."""
    run = root / name
    shutil.copytree(DATA / "miles", run)
    if table is not None:
        pq.write_table(table, run / "dashboard_columns" / "rollout_0.parquet")
    return run


def with_column(name: str, values: pa.Array) -> pa.Table:
    table = pq.read_table(MIRROR)
    i = table.column_names.index(name)
    return table.set_column(i, name, values)


def deep_column(depth: int) -> pa.Table:
    kind: Any = pa.string()
    data: Any = "x"
    for _ in range(depth):
        kind, data = pa.list_(kind), [data]
    table = pq.read_table(MIRROR)
    return table.append_column("deep", pa.array([data] * len(table), type=kind))


def list_bomb() -> pa.Table:
    """The token lists of 12 samples, each 100,000 ids (a few KB compressed): 9.6 MB once
    decoded, over the 2 MB step budget."""
    table = pq.read_table(MIRROR)
    n = 100_000
    table = table.set_column(
        table.column_names.index("tokens"), "tokens", pa.array([[7] * n] * len(table))
    )
    return table.set_column(
        table.column_names.index("total_length"),
        "total_length",
        pa.array([n] * len(table), pa.int32()),
    )


def trl_run(root: Path, name: str, state: str | bytes | None) -> Path:
    run = root / name
    shutil.copytree(DATA / "trl", run)
    (run / "trainer_state.json").unlink()
    if state is not None:
        data = state if isinstance(state, bytes) else state.encode()
        (run / "trainer_state.json").write_bytes(data)
    return run


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root, outside = tmp_path_factory.mktemp("hostile_new"), tmp_path_factory.mktemp("outside")
    shutil.copytree(DATA / "verl", root / "verl")
    shutil.copytree(DATA / "logged", root / "logged")
    miles_run(root, "miles-valid")
    miles_run(root, "miles-deep", deep_column(200))
    miles_run(root, "miles-bomb", list_bomb())
    inf = pq.read_table(MIRROR).column("rollout_log_probs").to_pylist()
    inf[3] = [float("inf")] * len(inf[3])
    miles_run(
        root,
        "miles-infinity",
        with_column("rollout_log_probs", pa.array(inf, pa.list_(pa.float32()))),
    )
    miles_run(root, "miles-fifo")
    miles_run(root, "miles-link")
    secret = with_column("tokens", pq.read_table(MIRROR).column("tokens"))
    away = outside / "secret.parquet"
    pq.write_table(secret.append_column("note", pa.array([SECRET] * len(secret))), away)
    link = root / "miles-link" / "dashboard_columns" / "rollout_0.parquet"
    link.unlink()
    link.symlink_to(away)
    for folder in ("rollout_data", "train_data"):  # a dump of pickles only
        (root / "miles-pickles" / folder).mkdir(parents=True)
        (root / "miles-pickles" / folder / "0.pt").write_bytes(PAYLOAD)
    # the trainers' metrics logs
    trl_run(root, "state-deep", '{"log_history": ' + "[" * 100_000 + "]" * 100_000 + "}")
    big = [{"step": s, "entropy": 0.1, "pad": "x" * 200} for s in range(12_000)]
    trl_run(root, "state-big", json.dumps({"log_history": big}))
    assert (root / "state-big" / "trainer_state.json").stat().st_size > STEP_BYTES
    trl_run(root, "state-fifo", None)
    os.mkfifo(root / "state-fifo" / "trainer_state.json")
    trl_run(root, "state-link", None)
    (outside / "trainer_state.json").write_text(
        json.dumps({"log_history": [{"step": 1, "entropy": 0.5, SECRET: 1}]})
    )
    (root / "state-link" / "trainer_state.json").symlink_to(outside / "trainer_state.json")
    verl = root / "verl-longline"
    shutil.copytree(DATA / "verl", verl)
    log = verl / "gmts-fixture" / "tiny-arith-grpo.jsonl"
    pad = json.dumps({"step": 9, "data": {"actor/entropy": 0.1, "pad": "x" * 9_000_000}})
    log.write_text(log.read_text() + pad + "\n")
    return root, outside


@pytest.fixture(scope="module")
def server(paths: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = hostile_settings(tmp_path_factory.mktemp("models"), paths[0])
    with LiveServer(create_app(settings)) as live:
        yield warmed_up(live)


@pytest.mark.parametrize(
    ("run", "status", "says"),
    [
        ("miles-deep", 422, "too deeply nested"),
        ("miles-bomb", 413, "GMTS_RUN_MAX_STEP_BYTES"),
        ("miles-infinity", 422, "'rollout_log_probs' is not finite"),
        ("miles-link", 422, "out of the run root"),
    ],
)
def test_a_hostile_miles_mirror_is_refused_cleanly(
    server: LiveServer, run: str, status: int, says: str
) -> None:
    readers = server.app.state.services.runs.readers
    killed = readers.killed
    resp = get(server, f"/v1/runs/{run}/steps/0", model="tiny-arith")
    assert resp.status_code == status, resp.text
    assert says in message(resp) and SECRET not in resp.text
    assert readers.killed == killed  # refused by the reading process, within its limits
    assert get(server, f"/v1/runs/{run}/steps/1", model="tiny-arith").status_code == 200
    assert_line_free(server)


def test_a_fifo_swapped_into_a_miles_run_is_refused_at_once(
    paths: tuple[Path, Path], server: LiveServer
) -> None:
    assert listing(server)["miles-fifo"]["readable"]
    step = paths[0] / "miles-fifo" / "dashboard_columns" / "rollout_0.parquet"
    step.unlink()
    os.mkfifo(step)
    resp = get(server, "/v1/runs/miles-fifo/steps/0", model="tiny-arith")
    assert resp.status_code == 422 and "FIFO" in message(resp)
    assert_line_free(server)


def test_pickle_files_alone_are_refused_and_never_loaded(
    paths: tuple[Path, Path], server: LiveServer
) -> None:
    """A dump of pickles only: its rollout_data/N.pt are slime's format (issue 45), unpickled
    only with torch.load(weights_only=True), which refuses the payload; nothing runs."""
    row = listing(server)["miles-pickles"]
    assert row["format"] == "slime" or not row["readable"], row
    resp = get(server, "/v1/runs/miles-pickles/steps/0", model="tiny-arith")
    assert resp.status_code == 422 and "weights_only=True" in message(resp), resp.text
    assert not any(p.name == "pickle-was-loaded" for p in paths[0].rglob("*"))
    assert not Path("/pickle-was-loaded").exists()


@pytest.mark.parametrize(
    ("run", "says"),
    [
        ("state-deep", "state-deep/trainer_state.json: not valid JSON (nested too deeply)"),
        ("state-big", "GMTS_RUN_MAX_STEP_BYTES"),
        ("state-fifo", "FIFO"),
        ("state-link", "out of the run root"),
        ("verl-longline", "GMTS_RUN_MAX_LINE_BYTES"),
    ],
)
def test_a_hostile_trainer_log_is_named_and_the_run_still_opens(
    server: LiveServer, run: str, says: str
) -> None:
    readers = server.app.state.services.runs.readers
    killed = readers.killed
    resp = get(server, f"/v1/runs/{run}")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["trainer_metrics"] is None and body["steps"]
    assert says in body["trainer_metrics_error"], body["trainer_metrics_error"]
    assert SECRET not in resp.text and str(server.app.state.services.runs.roots[0]) not in resp.text
    assert readers.killed == killed
    assert_line_free(server)


def test_a_valid_miles_run_and_trainer_log_after_all_of_it(server: LiveServer) -> None:
    assert get(server, "/v1/runs/miles-valid/steps/0", model="tiny-arith").status_code == 200
    body = get(server, "/v1/runs/verl").json()
    assert body["trainer_metrics"]["keys"]["entropy"] == "actor/entropy"


def test_one_unreadable_step_is_named_and_the_overview_still_answers(server: LiveServer) -> None:
    resp = get(server, "/v1/runs/miles-deep")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert "too deeply nested" in body["unreadable_steps"]["0"]
    assert body["overview"] and 0 not in [s["step"] for s in body["overview"]]
    assert str(server.app.state.services.runs.roots[0]) not in resp.text
