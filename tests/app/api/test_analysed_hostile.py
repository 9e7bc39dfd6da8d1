"""Hostile analysed-run datasets through a real uvicorn server (UI on): SQL, quotes and glob
characters in a manifest's method names and in run names, a manifest nested 100,000 deep or
sparse at 512 MiB, columns missing or mistyped, nulls where a value must be, a million-row
summary in 84 KB, a 100,000,000-character answer, folders and files that are links out of the
dataset, a FIFO swapped in for a step file. The server starts and stays up; every answer is
2xx or a 4xx JSON error naming no server path; nothing outside the root is read or written;
the good runs list and serve next to the unreadable ones; /healthz answers after each request
and the server's resident memory stays within 200 MB of its start (``get``)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.main import create_app
from gmts_core.run_dataset.schema import schema, step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import write_step
from tests.app.api.test_runs_hostile import SECRET, get, hostile_settings, rss_mb
from tests.app.api_helpers import LiveServer

METHODS = ("entropy", "gmts")
WRITTEN = "gmts-sql-was-here.csv"  # what a COPY ... TO in a manifest would write
SQL_METHODS = [
    "entropy FROM read_text('{secret}') --",
    "gmts\" FROM read_csv('{secret}') --",
    "x; COPY (SELECT 1) TO '{out}'",
    "x; ATTACH '{out}.db' AS a",
    "x; INSTALL httpfs",
    "x; SET enable_external_access = true",
    "*",
    'selected_gmts"',
]


def good(path: Path, steps: int = 2, seed: int = 0) -> Path:
    write_manifest(path, METHODS, {})
    rng = np.random.default_rng(seed)
    for step in range(1, steps + 1):
        write_step(path, synthetic_step(step, 6, 4, rng, median_length=20))
    return path


def rewrite(path: Path, table: str, step: int, change: Any) -> None:
    file = step_file(path, table, step)
    t = pq.read_table(file)
    pq.write_table(change(t), file)


def replace_column(name: str, values: pa.Array) -> Any:
    return lambda t: t.set_column(t.column_names.index(name), name, values)


def build(root: Path, outside: Path) -> None:
    (outside / "secret.txt").write_text(SECRET)
    secret_csv = outside / "secret.csv"
    secret_csv.write_text(f"a\n{SECRET}\n")
    good(root / "good")
    good(root / "g*", steps=1)  # a glob run id beside "good"
    good(root / "quote'run\"", steps=1)
    for i, method in enumerate(SQL_METHODS):
        run = good(root / f"sql-{i}", steps=1)
        doc = json.loads((run / "dataset.json").read_text())
        name = method.format(secret=secret_csv, out=outside / WRITTEN)
        doc["methods"] = ["entropy", name]
        (run / "dataset.json").write_text(json.dumps(doc))
    deep = good(root / "deep-manifest", steps=1)
    (deep / "dataset.json").write_text("[" * 100_000 + "]" * 100_000)
    sparse = good(root / "sparse-manifest", steps=1)
    with (sparse / "dataset.json").open("r+b") as f:
        f.truncate(512 << 20)
    newer = good(root / "newer", steps=1)
    doc = json.loads((newer / "dataset.json").read_text())
    (newer / "dataset.json").write_text(json.dumps({**doc, "version": 99}))
    # a steps file without num_tokens; one of a million rows (84 KB)
    rewrite(good(root / "no-num-tokens"), "steps", 2, lambda t: t.drop(["num_tokens"]))
    million = good(root / "million-rows")
    one = pq.read_table(step_file(million, "steps", 2))
    pq.write_table(
        pa.concat_tables([one] * 1_000_000).combine_chunks(),
        step_file(million, "steps", 2),
        compression="zstd",
    )
    n = pq.read_metadata(step_file(good(root / "nulls"), "answers", 1)).num_rows
    rewrite(root / "nulls", "answers", 1, replace_column("text", pa.nulls(n, pa.string())))
    rewrite(root / "nulls", "steps", 2, replace_column("num_tokens", pa.nulls(1, pa.int64())))
    typed = good(root / "step-as-text")
    rewrite(typed, "answers", 1, replace_column("step", pa.array(["1"] * n)))
    rewrite(typed, "answers", 2, replace_column("reward", pa.array(["high"] * n)))
    huge = good(root / "huge-cell", steps=1)
    texts = ["a" * 100_000_000] + ["b"] * (n - 1)
    rewrite(huge, "answers", 1, replace_column("text", pa.array(texts, pa.string())))
    # links: a folder and a file of the dataset leading out of it; a FIFO for a step file
    away = good(outside / "away")
    linked = good(root / "linked-folder")
    shutil.rmtree(linked / "answers")
    (linked / "answers").symlink_to(away / "answers")
    linked_file = good(root / "linked-file")
    step_file(linked_file, "tokens", 1).unlink()
    step_file(linked_file, "tokens", 1).symlink_to(step_file(away, "tokens", 1))
    fifo = good(root / "fifo")
    step_file(fifo, "tokens", 1).unlink()
    os.mkfifo(step_file(fifo, "tokens", 1))
    (root / "link-run").symlink_to(away)  # a run that is itself a link out of the root


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hostile_datasets")
    outside = tmp_path_factory.mktemp("outside")
    build(root, outside)
    return root, outside


@pytest.fixture(scope="module")
def server(paths: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = hostile_settings(
        tmp_path_factory.mktemp("models"),
        paths[0],
        ui_enabled=True,
        analysed_query_timeout_s=20.0,
        analysed_queue_wait_s=5.0,
    )
    with LiveServer(create_app(settings), start_timeout_s=300) as live:
        assert httpx.get(live.url + "/v1/analysed-runs", timeout=300).status_code == 200
        live.rss_start = rss_mb()  # type: ignore[attr-defined]
        yield live


def clean(server: LiveServer, resp: httpx.Response, root: Path) -> None:
    """A 2xx, or a 4xx JSON error; no server path and no outside text in it."""
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        assert "error" in resp.json()
    assert str(root) not in resp.text and SECRET not in resp.text
    assert "/proc/self/fd" not in resp.text


def runs(server: LiveServer) -> dict[str, Any]:
    resp = get(server, "/v1/analysed-runs")
    assert resp.status_code == 200, resp.text
    return {r["id"]: r for r in resp.json()["runs"]}


def test_good_runs_list_next_to_unreadable_ones(
    server: LiveServer, paths: tuple[Path, Path]
) -> None:
    listed = runs(server)
    assert listed["good"]["readable"] and listed["good"]["num_steps"] == 2
    for name in ("deep-manifest", "sparse-manifest", "newer", *(f"sql-{i}" for i in range(8))):
        assert not listed[name]["readable"] and listed[name]["reason"], name
    assert "nested too deeply" in listed["deep-manifest"]["reason"]
    assert "bytes" in listed["sparse-manifest"]["reason"]
    assert "link-run" not in listed  # a link is not a run
    for name in ("no-num-tokens", "million-rows", "nulls"):  # the bad step is left out
        row = listed[name]
        assert row["readable"] and row["num_steps"] == 1, row
        assert "step_00002.parquet" in row["skipped_steps"], row
    assert "num_tokens" in listed["no-num-tokens"]["skipped_steps"]["step_00002.parquet"]
    assert str(paths[0]) not in json.dumps(listed)


ROUTES = (
    "/v1/analysed-runs/{run}/steps",
    "/v1/analysed-runs/{run}/steps/1/groups",
    "/v1/analysed-runs/{run}/steps/1/groups/0/answers",
    "/v1/analysed-runs/{run}/steps/1/groups/0/answers/0/tokens",
    "/v1/analysed-runs/{run}/answers?contains=a",
    "/v1/analysed-runs/{run}/tokens",
    "/v1/analysed-runs/{run}/zero-signal-groups",
)


def test_every_route_of_every_hostile_run_is_clean_and_reads_nothing_outside(
    server: LiveServer, paths: tuple[Path, Path]
) -> None:
    root, outside = paths
    names = [p.name for p in root.iterdir()] + ["g%2A", "..", "%2E%2E"]
    for name in names:
        for route in ROUTES:
            resp = get(server, route.format(run=name))
            clean(server, resp, root)
    assert not (outside / WRITTEN).exists() and not (outside / f"{WRITTEN}.db").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["away", "secret.csv", "secret.txt"]


def test_a_glob_run_id_counts_its_own_answers_only(server: LiveServer) -> None:
    own = get(server, "/v1/analysed-runs/g%2A/answers").json()["page"]["total"]
    good = get(server, "/v1/analysed-runs/good/answers").json()["page"]["total"]
    assert own == 24 and good == 48


def test_mistyped_and_null_columns_are_a_422_naming_the_column(server: LiveServer) -> None:
    resp = get(server, "/v1/analysed-runs/step-as-text/steps/1/groups")
    assert resp.status_code == 422 and "'step'" in resp.json()["error"]["message"]
    resp = get(server, "/v1/analysed-runs/step-as-text/steps/2/groups")
    assert resp.status_code == 422 and "'reward'" in resp.json()["error"]["message"]
    resp = get(server, "/v1/analysed-runs/nulls/steps/1/groups/0/answers")
    assert resp.status_code == 422 and "'text'" in resp.json()["error"]["message"]


def test_a_huge_cell_comes_back_cut_with_a_marker(server: LiveServer) -> None:
    resp = get(server, "/v1/analysed-runs/huge-cell/steps/1/groups/0/answers")
    assert resp.status_code == 200, resp.text
    text = resp.json()["answers"][0]["text"]
    assert len(resp.content) < 1_000_000
    assert text.endswith("[cut: 100000000 characters]") and len(text) < 20_000


def test_links_and_fifos_are_refused_not_followed(server: LiveServer) -> None:
    resp = get(server, "/v1/analysed-runs/linked-folder/steps/1/groups")
    assert resp.status_code == 422 and "link" in resp.json()["error"]["message"]
    resp = get(server, "/v1/analysed-runs/linked-file/steps/1/groups/0/answers/0/tokens")
    assert resp.status_code == 422 and "link" in resp.json()["error"]["message"]
    resp = get(server, "/v1/analysed-runs/fifo/steps/1/groups/0/answers/0/tokens")
    assert resp.status_code == 422 and "FIFO" in resp.json()["error"]["message"]
    assert get(server, "/v1/analysed-runs/link-run/steps").status_code == 404


def test_a_fifo_swapped_in_while_served_never_takes_a_slot(
    server: LiveServer, paths: tuple[Path, Path]
) -> None:
    run = paths[0] / "good"
    assert get(server, "/v1/analysed-runs/good/steps/2/groups/0/answers/0/tokens").is_success
    saved = run / "saved.parquet"
    step_file(run, "tokens", 2).replace(saved)
    os.mkfifo(step_file(run, "tokens", 2))
    try:
        for _ in range(3):  # more than the lane's slots: none stays taken
            resp = get(server, "/v1/analysed-runs/good/steps/2/groups/0/answers/0/tokens")
            assert resp.status_code == 422 and "FIFO" in resp.json()["error"]["message"]
    finally:
        step_file(run, "tokens", 2).unlink()
        saved.replace(step_file(run, "tokens", 2))
    assert get(server, "/v1/analysed-runs/good/steps/2/groups/0/answers/0/tokens").is_success


def test_the_schema_is_the_format_s_own(paths: tuple[Path, Path]) -> None:
    """The fixtures above really are the format (the good run's files match its schema)."""
    t = pq.read_table(step_file(paths[0] / "good", "answers", 1))
    assert t.schema.names == schema("answers", METHODS).names
