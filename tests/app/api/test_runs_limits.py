"""Run files of sizes nobody chose, through a real uvicorn server: a 50 MB line (or cell) in
every reader's format, a 100,000-file folder, too many answers, a file malformed in the
middle, a name that is not UTF-8. Each gets a clean 4xx naming the limit and its setting (or
is listed as unreadable with the reason), no message or ``source`` holds a server path, and
``/healthz`` and ``/readyz`` are timed while each request is processed (the same style as
test_hostile: a slow answer is retried, at most 3 tries, so a scheduler hiccup on a loaded
2-core machine does not fail it; a blocked event loop fails every try). The measured times are
printed. Both HTTP clients are made before the timing starts: the server runs in this process,
and making a client (loading its CA bundle holds the interpreter for tens of ms, hundreds on a
busy machine) would count in the first probe, as if the first request of a fresh server (an
AReaL step when run alone) were slow.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from app.main import create_app
from tests.app.api_helpers import LiveServer, make_settings
from tests.patience import PATIENCE_S

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
HEALTHZ_BUDGET_S = 1.0  # the bound for /healthz while a run request is processed
TRIES = 3
REPEAT = 17_000_000  # " 85" x 17 M: a 51 MB completion, the red team's line
MANY_FILES = 100_000


def big_text() -> str:
    return " 85" * REPEAT


def write_big_line(path: Path, head: bytes, tail: bytes) -> None:
    """``head + " 85" x 17 M + tail`` on one line, written in pieces (never one 51 MB str)."""
    piece = b" 85" * 1_000_000
    with path.open("wb") as f:
        f.write(head)
        for _ in range(REPEAT // 1_000_000):
            f.write(piece)
        f.write(tail + b"\n")


def build_root(root: Path) -> None:
    for name in ("trl", "verl"):
        shutil.copytree(DATA / name, root / name)
    # one 50 MB line in each JSONL reader's format
    write_big_line(
        root / "big.jsonl",
        b'{"prompt": "Q: 47+38=?", "completions": ["',
        b'", " 75"], "rewards": [1, 0], "step": 1}',
    )
    (root / "big_verl").mkdir()
    write_big_line(
        root / "big_verl" / "1.jsonl", b'{"input": "Q", "output": "', b'", "score": 1, "step": 1}'
    )
    (root / "big_roll").mkdir()
    write_big_line(
        root / "big_roll" / "rollout_dump_data.step_1.jsonl",
        b'{"prompt": ["Q", "Q"], "responses": [" 75", "',
        b'"], "scores": [0, 1], "global_step": [1, 1]}',
    )
    (root / "big_areal" / "rollout" / "1").mkdir(parents=True)
    write_big_line(
        root / "big_areal" / "rollout" / "1" / "t0.jsonl",
        b'{"task_id": 0, "sample_idx": 0, "prompt": "Q", "completion": "',
        b'", "reward": 1}',
    )
    # a 50 MB parquet cell: TRL's completions and the trainer's token log
    (root / "big_trl" / "completions").mkdir(parents=True)
    table = pa.table(
        {
            "step": [1, 1],
            "prompt": ["Q", "Q"],
            "completion": [big_text(), " 75"],
            "r": [1.0, 0.0],
            "advantage": [0.5, -0.5],
        }
    )
    pq.write_table(table, root / "big_trl" / "completions" / "completions_00001.parquet")
    del table
    from gmts_core.runs.trainer_log import SCHEMA

    (root / "big_log" / "gmts_selection").mkdir(parents=True)
    row: dict[str, Any] = {n: [None] for n in SCHEMA.names}
    row.update(step=[1], micro_batch=[0], answer=[0], position=[0], token_id=[5], prompt=["Q"])
    row.update(completion=[big_text()], method=["gmts"], advantage=[0.5])
    table = pa.table(row, schema=SCHEMA)
    pq.write_table(table, root / "big_log" / "gmts_selection" / "selection_00001.parquet")
    del table
    # 100,000 empty files in one folder
    many = root / "many"
    many.mkdir()
    for i in range(MANY_FILES):
        os.close(os.open(many / f"{i}.jsonl", os.O_CREAT | os.O_WRONLY, 0o644))
    # too many answers in one group; an answer over the analysis' characters
    ok = {"prompt": "Q: 1+1=?", "rewards": None, "step": 1}
    answers = [f" {i}" for i in range(600)]
    (root / "crowd.jsonl").write_text(
        json.dumps({**ok, "completions": answers, "rewards": [0] * 600}) + "\n"
    )
    long_answer = {**ok, "completions": ["7" * 20_000, " 2"], "rewards": [0, 1]}
    (root / "long.jsonl").write_text(json.dumps(long_answer) + "\n")
    # a file malformed in the middle, and a name that is not UTF-8
    good = json.dumps({**ok, "completions": [" 2", " 3"], "rewards": [1, 0]})
    (root / "mid_bad.jsonl").write_text(good + "\n{not json\n" + good.replace("1}", "2}") + "\n")
    with open(os.path.join(os.fsencode(root), b"bad\xff.jsonl"), "wb") as f:
        f.write(good.encode() + b"\n")
    (root / "notes.txt").write_text("not a run")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs_limits")
    build_root(path)
    return path


@pytest.fixture(scope="module")
def server(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = make_settings(
        tmp_path_factory.mktemp("models"),
        run_roots=[root],
        default_model="tiny-arith",
        max_total_tokens=4096,
        max_answer_chars=16_000,
        max_prompt_chars=8_000,
        run_list_wait_s=300,  # the listing answers once every entry is indexed
    )
    with LiveServer(create_app(settings)) as live:
        yield live


def timed(server: LiveServer, path: str, params: dict[str, Any] | None = None) -> tuple[Any, float]:
    """GET ``path`` and, while it is processed, time /healthz and /readyz (the slowest of
    their answers)."""
    result: dict[str, Any] = {}
    done = threading.Event()

    def go(http: httpx.Client) -> None:
        try:
            result["resp"] = http.get(path, params=params)
        finally:
            done.set()

    slowest = 0.0
    with (
        httpx.Client(base_url=server.url, timeout=300) as http,
        httpx.Client(base_url=server.url, timeout=PATIENCE_S) as health,
    ):
        worker = threading.Thread(target=go, args=(http,))
        health.get("/healthz")  # open the connection first: time only the answer
        worker.start()
        while True:  # at least one /healthz and /readyz while the request is in flight
            for probe in ("/healthz", "/readyz"):
                start = time.perf_counter()
                assert health.get(probe).status_code == 200
                slowest = max(slowest, time.perf_counter() - start)
            if done.wait(0.05):
                break
    worker.join(300)
    return result["resp"], slowest


def with_health(server: LiveServer, path: str, params: dict[str, Any] | None = None) -> Any:
    for _ in range(TRIES):
        resp, slowest = timed(server, path, params)
        if slowest < HEALTHZ_BUDGET_S:
            break
    print(f"/healthz, /readyz during GET {path}: slowest {slowest * 1000:.1f} ms")  # noqa: T201
    assert slowest < HEALTHZ_BUDGET_S, f"{path}: /healthz or /readyz took {slowest:.2f} s"
    return resp


def no_server_paths(text: str, root: Path) -> None:
    for p in {str(root), str(root.resolve()), "/tmp/"}:
        assert p not in text, text


@pytest.mark.parametrize(
    ("run", "limit"),
    [
        ("big.jsonl", "max_line_bytes"),
        ("big_verl", "max_line_bytes"),
        ("big_roll", "max_line_bytes"),
        ("big_areal", "max_line_bytes"),
        ("big_trl", "max_field_chars"),
        ("big_log", "max_field_chars"),
        ("crowd.jsonl", "max_group_answers"),
    ],
)
def test_a_50mb_line_or_cell_in_each_format_is_a_413_naming_the_limit(
    server: LiveServer, root: Path, run: str, limit: str
) -> None:
    resp = with_health(server, f"/v1/runs/{run}/steps/1", {"model": "tiny-arith"})
    assert resp.status_code == 413, resp.text
    err = resp.json()["error"]
    assert err["code"] == "run_limit_exceeded"
    assert f"{limit} = " in err["message"] and f"GMTS_RUN_{limit.upper()}" in err["message"]
    no_server_paths(resp.text, root)


def test_a_100000_file_folder_is_refused_after_its_limit(server: LiveServer, root: Path) -> None:
    resp = with_health(server, "/v1/runs/many")
    assert resp.status_code == 413, resp.text
    message = resp.json()["error"]["message"]
    assert message.startswith("many: the folder has more than 10,000 entries")
    assert "GMTS_RUN_MAX_FOLDER_ENTRIES" in message
    no_server_paths(resp.text, root)


def test_an_answer_over_the_analysis_limit_is_refused_before_tokenizing(
    server: LiveServer, root: Path
) -> None:
    resp = with_health(server, "/v1/runs/long.jsonl/steps/1", {"model": "tiny-arith"})
    assert resp.status_code == 413, resp.text
    message = resp.json()["error"]["message"]
    assert message.startswith("long.jsonl:1: an answer of 20,000 characters")
    assert "GMTS_MAX_ANSWER_CHARS" in message and "gmts analyze-run" in message


def test_the_listing_survives_any_name_and_any_malformed_file(
    server: LiveServer, root: Path
) -> None:
    resp = with_health(server, "/v1/runs")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    runs = {r["id"]: r for r in body["runs"]}
    assert runs["trl"]["readable"] and runs["trl"]["num_steps"] == 3
    bad = runs["bad\\xff.jsonl"]
    assert not bad["readable"] and "not valid UTF-8" in bad["reason"]
    mid = runs["mid_bad.jsonl"]
    assert not mid["readable"] and mid["reason"].startswith("mid_bad.jsonl:2: not valid JSON")
    assert not runs["big.jsonl"]["readable"] and "max_line_bytes" in runs["big.jsonl"]["reason"]
    assert not runs["many"]["readable"] and "max_folder_entries" in runs["many"]["reason"]
    assert runs["big_verl"]["readable"]  # its index is file names: the step itself is refused
    assert "notes.txt" not in runs and body["ignored"] == 1 and not body["truncated"]
    no_server_paths(resp.text, root)
    opened = httpx.get(f"{server.url}/v1/runs/mid_bad.jsonl", timeout=PATIENCE_S)
    assert opened.status_code == 422 and "mid_bad.jsonl:2" in opened.json()["error"]["message"]
    no_server_paths(opened.text, root)


def test_sources_and_messages_are_relative_to_the_run_root(server: LiveServer, root: Path) -> None:
    resp = with_health(server, "/v1/runs/trl/steps/2", {"model": "tiny-arith"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["report"]["source"] == "trl/completions/completions_00002.parquet"
    no_server_paths(resp.text, root)
    missing = httpx.get(f"{server.url}/v1/runs/verl/steps/99", timeout=PATIENCE_S)
    assert missing.status_code == 422 and "no step 99" in missing.text
    no_server_paths(missing.text, root)


def test_a_root_with_100000_entries_is_listed_up_to_its_limit(root: Path, tmp_path: Path) -> None:
    # its default model available, so /readyz answers 200 while the listing is timed
    settings = make_settings(
        tmp_path,
        run_roots=[root / "many"],
        run_max_folder_entries=2_000,
        default_model="tiny-arith",
    )
    with LiveServer(create_app(settings)) as live:
        resp = with_health(live, "/v1/runs")
    body = resp.json()
    assert resp.status_code == 200 and body["truncated"]
    assert len(body["runs"]) == 2_000  # empty .jsonl files: listed, unreadable, with a reason
    assert all(not r["readable"] and r["reason"] for r in body["runs"])


def test_the_cli_has_larger_limits_named_by_its_options(root: Path, tmp_path: Path) -> None:
    import app.cli.analyze_run  # noqa: F401  (registers the command)
    from app.cli._app import cli

    runner = CliRunner()
    out = runner.invoke(cli, ["analyze-run", str(root / "big.jsonl"), "-o", str(tmp_path / "o")])
    assert out.exit_code == 2
    assert "max_field_chars = 1,000,000 (raise it with --run-max-field-chars)" in out.output
    small = ["--run-max-line-bytes", "1000000"]
    out = runner.invoke(
        cli, ["analyze-run", str(root / "big.jsonl"), "-o", str(tmp_path / "o"), *small]
    )
    assert out.exit_code == 2 and "--run-max-line-bytes" in out.output
