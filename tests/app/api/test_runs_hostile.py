"""Hostile run files through a real uvicorn server, for every reader's format: special files
swapped in after indexing (a FIFO, directly and through a link), links inside runs that lead
out of the root, nested-type bombs in parquet, deep nesting on a JSONL's first line,
out-of-range numbers, bad encodings, null values where the format needs one, duplicate step
numbers, names no run id may have. Each answers a clean 4xx naming the file (and field)
or is listed as unreadable with its reason; never a 5xx; the server stays up, ``/healthz``
answers after each (its time is printed, not asserted: CI is a loaded 2-core machine) and the
server's resident memory (the server runs in this process: psutil) is within 200 MB of what it
was once the server had served its first ordinary steps.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.main import create_app
from gmts_core.runs.trainer_log import SCHEMA
from tests.app.api_helpers import LiveServer, given_body, make_settings
from tests.patience import PATIENCE_S

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
STEP_BYTES = 2_000_000  # the server's max_step_bytes here: a bomb must stop at it
SECRET = "the outside file's secret text"
LINE = {"prompt": "Q: 1+1=?", "completions": [" 2", " 3"], "rewards": [1, 0], "step": 1}
RSS_SLACK_MB = 200  # the server's resident memory after a hostile input, over its start


def rss_mb() -> float:
    """This process's resident memory in MB: the LiveServer's (it runs in a thread here) and
    never a reading process's (those are children)."""
    return float(psutil.Process().memory_info().rss) / 2**20


def warmed_up(live: LiveServer) -> LiveServer:
    """``live`` once it has listed its runs and served an ordinary step of an analysed and of
    a logged run (the model loaded, the reading processes started), with its resident memory
    then as ``live.rss_start``: what :func:`get` compares against after each request."""
    assert httpx.get(live.url + "/v1/runs", timeout=300).status_code == 200
    for run in ("verl", "logged"):
        resp = httpx.get(live.url + f"/v1/runs/{run}/steps/1", timeout=300)
        assert resp.status_code == 200, resp.text
    live.rss_start = rss_mb()  # type: ignore[attr-defined]
    return live


def jsonl(path: Path, *rows: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def verl_row(**kw: Any) -> dict[str, Any]:
    return {"input": "Q: 1+1=?", "output": " 2", "score": 1.0, "step": 1, **kw}


def token_log(path: Path, **column: Any) -> None:
    """A one-token trainer log whose columns are valid except those given."""
    row: dict[str, Any] = {n: [None] for n in SCHEMA.names}
    row.update(step=[1], micro_batch=[0], answer=[0], position=[0], token_id=[5])
    row.update(prompt=["Q"], completion=[" 2"], method=["gmts"], advantage=[0.5])
    row.update(entropy=[0.1], logprob=[-0.1], grad_norm=[1.0], grad_proxy=[0.5], weight=[1.0])
    row.update(selected=[True], selected_entropy=[False], selected_gmts=[True])
    row.update(column)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(row, schema=SCHEMA), path)


def trl(path: Path, **extra: Any) -> None:
    cols: dict[str, Any] = {
        "step": pa.array([1, 1]),
        "prompt": pa.array(["Q", "Q"]),
        "completion": pa.array([" 2", " 3"]),
        "r": pa.array([1.0, 0.0]),
        **extra,
        "advantage": pa.array([0.5, -0.5]),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)


def invalid_utf8() -> pa.Array:
    """A string array holding the bytes ff fe (Arrow does not check when built from buffers)."""
    data = b"ok\xff\xfe"
    offsets = pa.py_buffer(pa.array([0, 2, 4], pa.int32()).buffers()[1])
    return pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(data)])


def build_root(root: Path, outside: Path) -> None:
    for name in ("verl", "roll", "areal", "logged", "trl"):
        shutil.copytree(DATA / name, root / name)
    shutil.copy(DATA / "run.jsonl", root / "run.jsonl")
    (outside / "secret.jsonl").write_text(json.dumps({**LINE, "prompt": SECRET}) + "\n")
    # a link inside a run that leads out of the root; a link to /proc/self/environ
    shutil.copytree(DATA / "verl", root / "escape")
    os.symlink(outside / "secret.jsonl", root / "escape" / "4.jsonl")
    shutil.copytree(DATA / "verl", root / "environ")
    os.symlink("/proc/self/environ", root / "environ" / "4.jsonl")
    (root / "outdir").mkdir()
    os.symlink(outside, root / "outdir" / "completions")
    # nested-type bombs: one dictionary value repeated in a map and a fixed-size list
    big = "x" * 10_000
    n = 400
    trl(
        root / "bomb_map" / "completions" / "completions_00001.parquet",
        meta=pa.array([[("k", big)] * 1] * 2, type=pa.map_(pa.string(), pa.string())),
    )
    bomb = pa.array([[(big, big)] * n] * 2, type=pa.map_(pa.string(), pa.string()))
    trl(root / "bomb_map" / "completions" / "completions_00002.parquet", meta=bomb)
    fixed = pa.array([[big] * n] * 2, type=pa.list_(pa.string(), n))
    trl(root / "bomb_fixed" / "completions" / "completions_00001.parquet", tags=fixed)
    words = pa.array([big * 2] * 2).dictionary_encode()
    many = pa.array([[big] * n] * 2, type=pa.list_(pa.string()))
    trl(root / "bomb_dict" / "completions" / "completions_00001.parquet", w=words, m=many)
    # deep nesting on a JSONL's first line (format detection) and on a verl step's
    deep = "[" * 100_000 + "]" * 100_000
    jsonl(root / "deep.jsonl", '{"prompt": ' + deep + "}", LINE)
    jsonl(root / "deep_verl" / "1.jsonl", '{"input": ' + deep + "}")
    # out-of-range numbers in every JSONL reader's format
    for i, reward in enumerate(("1e300", "-1e300", "1" + "0" * 400, "1e400", "Infinity")):
        jsonl(root / f"big_reward_{i}.jsonl", json.dumps(LINE).replace("[1, 0]", f"[{reward}, 0]"))
        jsonl(
            root / f"verl_reward_{i}" / "1.jsonl",
            f'{{"input": "Q", "output": "a", "score": {reward}}}',
        )
    roll = '{"prompt": ["Q"], "responses": ["a"], "scores": [1e300], "global_step": [1]}'
    jsonl(root / "roll_reward" / "rollout_dump_data.step_1.jsonl", roll)
    areal = '{"task_id": 0, "sample_idx": 0, "prompt": "Q", "completion": "a", "reward": -1e300}'
    jsonl(root / "areal_reward" / "rollout" / "1" / "t0.jsonl", areal)
    jsonl(root / "big_step.jsonl", {**LINE, "step": 10**400 // 10**380})
    # bad encodings: a lone surrogate (escaped, and UTF-8-encoded), UTF-16 LE and BE
    jsonl(root / "surrogate.jsonl", json.dumps(LINE).replace('" 3"', '" \\ud800"'))
    jsonl(
        root / "surrogate_verl" / "1.jsonl",
        json.dumps(verl_row(output="\\udfff")).replace("\\\\", "\\"),
    )
    (root / "surrogate_raw.jsonl").write_bytes(
        json.dumps(LINE).replace(" 3", "@@").encode().replace(b"@@", b"\xed\xa0\x80") + b"\n"
    )
    text = json.dumps(LINE) + "\n" + json.dumps({**LINE, "step": 2}) + "\n"
    (root / "utf16le.jsonl").write_bytes(text.encode("utf-16"))  # with its BOM (LE here)
    (root / "utf16le_nobom.jsonl").write_bytes(text.encode("utf-16-le"))
    (root / "utf16be.jsonl").write_bytes(text.encode("utf-16-be"))
    # invalid UTF-8 in a parquet string column; chat content parts with non-string text
    trl(root / "trl_utf8" / "completions" / "completions_00001.parquet", note=invalid_utf8())
    cols = {
        "prompt": pa.array(["Q", "Q"]),
        "completion": [[{"role": "assistant", "content": [{"type": "text", "text": 7}]}]] * 2,
        "r": [1.0, 0.0],
    }
    (root / "trl_parts" / "completions").mkdir(parents=True)
    pq.write_table(pa.table(cols), root / "trl_parts" / "completions" / "completions_00001.parquet")
    parts = {**LINE, "prompt": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}
    jsonl(root / "chat_parts.jsonl", parts)
    # trainer logs with a null where a value is required, a token id of 2**62, an infinity
    for name, column in (
        ("null_advantage", {"advantage": [None]}),
        ("null_prompt", {"prompt": [None]}),
        ("null_entropy", {"entropy": [None]}),
        ("huge_token", {"token_id": [2**62]}),
        ("inf_proxy", {"grad_proxy": [float("inf")]}),
    ):
        token_log(root / f"log_{name}" / "gmts_selection" / "selection_00001.parquet", **column)
    # duplicate step numbers; an AReaL version int() refuses; unicode digits
    for name in ("1.jsonl", "01.jsonl", "001.jsonl"):
        jsonl(root / "dupes" / name, verl_row())
    jsonl(
        root / "areal_sup" / "rollout" / "²" / "t.jsonl", json.loads(areal.replace("-1e300", "1"))
    )
    jsonl(
        root / "areal_dupes" / "rollout" / "1" / "t.jsonl", json.loads(areal.replace("-1e300", "1"))
    )
    jsonl(
        root / "areal_dupes" / "rollout" / "01" / "t.jsonl",
        json.loads(areal.replace("-1e300", "1")),
    )
    jsonl(root / "arabic_digit" / "١.jsonl", verl_row())
    # names no run id may have, a FIFO, a broken link and a link loop at the root
    for name in ("new\nline.jsonl", "back\\slash.jsonl", "pct%2e.jsonl", "~tilde.jsonl"):
        jsonl(root / name, LINE)
    os.mkfifo(root / "fifo.jsonl")
    os.symlink(root / "missing", root / "broken.jsonl")
    os.symlink(root / "loop.jsonl", root / "loop.jsonl")


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hostile_runs")
    outside = tmp_path_factory.mktemp("outside")
    build_root(root, outside)
    return root, outside


def hostile_settings(models: Path, root: Path, **overrides: Any) -> Any:
    values: dict[str, Any] = dict(
        run_roots=[root],
        default_model="tiny-arith",
        max_total_tokens=4096,
        run_max_step_bytes=STEP_BYTES,
    )
    values.update(overrides)
    return make_settings(models, **values)


@pytest.fixture(scope="module")
def server(paths: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = hostile_settings(tmp_path_factory.mktemp("models"), paths[0])
    with LiveServer(create_app(settings)) as live:
        yield warmed_up(live)


def get(server: LiveServer, path: str, **params: Any) -> httpx.Response:
    """GET ``path``; then /healthz, whose time is printed, and the server's resident memory,
    within :data:`RSS_SLACK_MB` of its start where the server was :func:`warmed_up`."""
    resp = httpx.get(server.url + path, params=params, timeout=PATIENCE_S)
    start = time.perf_counter()
    health = httpx.get(server.url + "/healthz", timeout=PATIENCE_S)
    took_ms = (time.perf_counter() - start) * 1e3
    rss, rss_start = rss_mb(), getattr(server, "rss_start", None)
    grown = "" if rss_start is None else f"; RSS {rss - rss_start:+.0f} MB"
    print(f"GET {path}: {resp.status_code}; /healthz after: {took_ms:.0f} ms{grown}")  # noqa: T201
    assert health.status_code == 200
    assert resp.status_code < 500, resp.text
    if rss_start is not None:
        assert rss - rss_start < RSS_SLACK_MB, (path, rss_start, rss)
    return resp


def message(resp: httpx.Response) -> str:
    return str(resp.json()["error"]["message"])


def listing(server: LiveServer) -> dict[str, Any]:
    resp = get(server, "/v1/runs")
    assert resp.status_code == 200, resp.text
    return {r["id"]: r for r in resp.json()["runs"]}


def test_a_root_of_hostile_entries_is_listed_one_row_each(server: LiveServer) -> None:
    runs = listing(server)
    assert runs["verl"]["readable"] and runs["trl"]["readable"] and runs["run.jsonl"]["readable"]
    for name, says in (
        ("deep.jsonl", "nested"),
        ("dupes", "step 1 is in 3 files, 001.jsonl, 01.jsonl and 1.jsonl"),
        ("areal_dupes", "version 1 is in 2 folders, 01 and 1"),
        ("new\nline.jsonl", "character"),
        ("fifo.jsonl", "FIFO"),
    ):
        assert not runs[name]["readable"], name
        assert runs[name]["state"] == "unreadable"
        assert says in runs[name]["reason"], (name, runs[name]["reason"])
    assert "areal_sup" not in runs or not runs["areal_sup"]["readable"]  # no step at all
    assert "arabic_digit" not in runs  # a non-ASCII digit is no step number
    assert runs["utf16le.jsonl"]["readable"] and runs["utf16le.jsonl"]["num_steps"] == 2
    assert runs["utf16le_nobom.jsonl"]["num_steps"] == 2 and runs["utf16be.jsonl"]["num_steps"] == 2


def test_duplicate_step_files_are_an_error_naming_them(server: LiveServer) -> None:
    """``1.jsonl``, ``01.jsonl`` and ``001.jsonl`` all hold step 1: each one is named."""
    for path in ("/v1/runs/dupes", "/v1/runs/dupes/steps/1"):
        resp = get(server, path)
        assert resp.status_code == 422, resp.text
        assert "step 1 is in 3 files, 001.jsonl, 01.jsonl and 1.jsonl" in message(resp)


@pytest.mark.parametrize("target", ["direct", "link"])
def test_a_fifo_swapped_in_after_indexing_is_refused_at_once(
    paths: tuple[Path, Path], server: LiveServer, target: str, tmp_path: Path
) -> None:
    root = paths[0]
    run = f"fifo_{target}"
    shutil.copytree(DATA / "trl", root / run)
    runs = listing(server)
    assert runs[run]["readable"]
    assert get(server, f"/v1/runs/{run}").status_code == 200  # its index: the latest opened
    step = root / run / "completions" / "completions_00001.parquet"
    step.unlink()
    if target == "direct":
        os.mkfifo(step)
    else:
        (root / "pipes").mkdir(exist_ok=True)  # outside the run: its index stays as it was
        os.mkfifo(root / "pipes" / run)
        os.symlink(root / "pipes" / run, step)
    services = server.app.state.services
    killed = services.runs.readers.killed
    resp = get(server, f"/v1/runs/{run}/steps/1")
    assert resp.status_code == 422 and "FIFO" in message(resp), resp.text
    # within its wall-time limit: the reading process answered the refusal itself (one past
    # GMTS_RUN_WORKER_WALL_S is killed, and its answer names that setting)
    assert services.runs.readers.killed == killed
    assert "GMTS_RUN_WORKER_WALL_S" not in message(resp)
    assert_line_free(server)
    # the job slot is free: a normal step is served next, and an analysis
    assert get(server, "/v1/runs/verl/steps/1").status_code == 200
    analysis = httpx.post(server.url + "/v1/analyze", json=given_body(), timeout=300)
    assert analysis.status_code == 200, analysis.text


def assert_line_free(server: LiveServer) -> None:
    """No job runs or waits, and /v1/queue tells a new request it runs at once."""
    services = server.app.state.services
    assert services.jobs.running == 0 and services.jobs.waiting == 0
    assert services.runs.readers.reading.get("load", 0) == 0
    queue = httpx.get(server.url + "/v1/queue", timeout=PATIENCE_S).json()
    assert queue["running"] == 0 and queue["waiting"] == 0, queue
    assert queue["next_place"] == 0 and queue["estimated_wait_s"] == 0.0, queue


@pytest.mark.parametrize("run", ["escape", "environ"])
def test_a_link_out_of_the_root_is_never_read(server: LiveServer, run: str) -> None:
    resp = get(server, f"/v1/runs/{run}/steps/4")
    assert resp.status_code == 422 and "out of the run root" in message(resp), resp.text
    assert SECRET not in resp.text and "PATH=" not in resp.text
    assert get(server, f"/v1/runs/{run}/steps/1").status_code == 200


def test_a_linked_folder_out_of_the_root_is_never_listed(server: LiveServer) -> None:
    resp = get(server, "/v1/runs/outdir")
    assert resp.status_code in (404, 422), resp.text
    assert "secret" not in resp.text


@pytest.mark.parametrize("run", ["bomb_map", "bomb_fixed", "bomb_dict"])
def test_nested_type_bombs_stop_at_the_step_budget(server: LiveServer, run: str) -> None:
    step = {"bomb_map": 2}.get(run, 1)
    resp = get(server, f"/v1/runs/{run}/steps/{step}")
    assert resp.status_code == 413, resp.text
    assert "max_step_bytes" in message(resp) and "GMTS_RUN_MAX_STEP_BYTES" in message(resp)


def test_a_map_column_within_budget_is_read(server: LiveServer) -> None:
    assert get(server, "/v1/runs/bomb_map/steps/1").status_code == 200


@pytest.mark.parametrize(
    ("run", "field"),
    [
        *[(f"big_reward_{i}.jsonl", "reward") for i in range(5)],
        *[(f"verl_reward_{i}", "score") for i in range(5)],
        ("roll_reward", "scores"),
        ("areal_reward", "reward"),
    ],
)
def test_out_of_range_numbers_are_a_422_naming_file_line_and_field(
    server: LiveServer, run: str, field: str
) -> None:
    resp = get(server, f"/v1/runs/{run}/steps/1")
    assert resp.status_code == 422, resp.text
    text = message(resp)
    assert field in text and ":1" in text, text
    assert "out of range" in text, text


def test_a_step_number_past_2_53_is_refused(server: LiveServer) -> None:
    runs = listing(server)
    assert not runs["big_step.jsonl"]["readable"]
    assert "out of range" in runs["big_step.jsonl"]["reason"]


@pytest.mark.parametrize("run", ["surrogate.jsonl", "surrogate_raw.jsonl", "surrogate_verl"])
def test_a_lone_surrogate_is_a_422_naming_the_field(server: LiveServer, run: str) -> None:
    resp = get(server, f"/v1/runs/{run}/steps/1")
    assert resp.status_code == 422, resp.text
    assert "surrogate" in message(resp) and ":1" in message(resp)


@pytest.mark.parametrize("run", ["utf16le.jsonl", "utf16le_nobom.jsonl", "utf16be.jsonl"])
def test_utf16_in_either_byte_order_is_read(server: LiveServer, run: str) -> None:
    resp = get(server, f"/v1/runs/{run}/steps/2")
    assert resp.status_code == 200, resp.text
    assert resp.json()["previous"] == 1


def test_invalid_utf8_in_a_parquet_string_is_a_422_naming_the_column(server: LiveServer) -> None:
    resp = get(server, "/v1/runs/trl_utf8/steps/1")
    assert resp.status_code == 422, resp.text
    assert "'note'" in message(resp)


@pytest.mark.parametrize("run", ["trl_parts", "chat_parts.jsonl"])
def test_chat_content_parts_with_non_string_text_are_a_422(server: LiveServer, run: str) -> None:
    resp = get(server, f"/v1/runs/{run}/steps/1")
    assert resp.status_code == 422, resp.text
    assert "'text' must be a string" in message(resp)


@pytest.mark.parametrize(
    ("run", "says"),
    [
        ("log_null_advantage", "'advantage' is null"),
        ("log_null_prompt", "'prompt' is null"),
        ("log_null_entropy", "'entropy' is null"),
        ("log_huge_token", "'token_id' is out of range"),
        ("log_inf_proxy", "'grad_proxy' is not finite"),
    ],
)
def test_trainer_log_values_the_format_forbids_are_a_422(
    server: LiveServer, run: str, says: str
) -> None:
    resp = get(server, f"/v1/runs/{run}/steps/1")
    assert resp.status_code == 422, resp.text
    assert says in message(resp) and "row 1" in message(resp), message(resp)


def test_deep_nesting_in_a_step_is_a_422(server: LiveServer) -> None:
    resp = get(server, "/v1/runs/deep_verl/steps/1")
    assert resp.status_code == 422 and "nested" in message(resp), resp.text


def test_the_methods_parameter_is_an_enum_of_the_registered_methods(server: LiveServer) -> None:
    resp = get(server, "/v1/runs/verl/steps/1", methods="entropy,nonsense")
    assert resp.status_code == 422
    schema = httpx.get(server.url + "/openapi.json", timeout=PATIENCE_S).json()
    params = schema["paths"]["/v1/runs/{run_id}/steps/{step}"]["get"]["parameters"]
    pattern = next(p for p in params if p["name"] == "methods")["schema"]["pattern"]
    assert "gmts" in pattern and "entropy" in pattern


def test_the_server_starts_with_the_ui_on_over_a_hostile_root(
    paths: tuple[Path, Path], tmp_path: Path
) -> None:
    settings = hostile_settings(tmp_path, paths[0], ui_enabled=True, run_list_wait_s=0)
    with LiveServer(create_app(settings), start_timeout_s=PATIENCE_S) as live:
        assert httpx.get(live.url + "/healthz", timeout=PATIENCE_S).status_code == 200
        body = httpx.get(live.url + "/v1/runs", timeout=PATIENCE_S).json()
        states = {r["state"] for r in body["runs"]}
        assert states <= {"ready", "indexing", "unreadable"}


def test_a_listing_answers_at_once_while_big_runs_are_indexed(tmp_path: Path) -> None:
    """Four 20 MB JSONL runs (their index is a pass over every line): the first listing,
    told not to wait, answers with them ``indexing``; one that waits for the index lists them
    ready; the index is cached, so a third listing has nothing to wait for."""
    root = tmp_path / "runs"
    root.mkdir()
    line = (json.dumps({**LINE, "completions": [" 2" * 2_000, " 3"]}) + "\n").encode()
    for i in range(4):
        with (root / f"big{i}.jsonl").open("wb") as f:
            for step in range(20_000_000 // len(line)):
                f.write(line.replace(b'"step": 1', f'"step": {step}'.encode()))
    settings = hostile_settings(tmp_path / "models", root, run_list_wait_s=0)
    with LiveServer(create_app(settings)) as live:
        first = get(live, "/v1/runs").json()["runs"]
        assert {r["state"] for r in first} <= {"indexing", "ready"}
        assert any(r["state"] == "indexing" for r in first)
        runs = live.app.state.services.runs.run_roots  # where the listing reads its wait
        runs.settings = runs.settings.model_copy(update={"run_list_wait_s": 300})
        ready = get(live, "/v1/runs").json()["runs"]
        assert [r["state"] for r in ready] == ["ready"] * 4, ready
        runs.settings = runs.settings.model_copy(update={"run_list_wait_s": 0})
        again = get(live, "/v1/runs").json()["runs"]
        assert again == ready
