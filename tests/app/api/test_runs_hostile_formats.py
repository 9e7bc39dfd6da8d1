"""Every reader's format (TRL, verl, ROLL, AReaL, JSONL, trainer logs) against every class of
hostile input, through a real uvicorn server that was started over an empty run root: the
entries appear after startup (hostile names among them: an AReaL version folder ``²``, a name
with a newline, one that is not UTF-8), so none was read before the first listing.

For each format a valid two-step run is written with one class of damage in its step 1:
nesting 100k levels deep on the first line (a parquet schema nested past Arrow's limit), a
number out of range, a lone surrogate, bytes that are not UTF-8, a nested-type bomb (a few KB
that decode to more than the step budget), a link from inside the run out of the root (to a
file with a secret, to a folder) or a FIFO or a link to ``/dev/zero`` swapped in after the
run was indexed. Each answers a clean 4xx that says why (step 2 of the same run is still
served where the damage is in step 1 alone), the listing holds one row per entry (an
unreadable one saying why), never a 5xx; the job queue is free after each, ``/healthz`` answers
(its time printed) and the server's resident memory stays within 200 MB of its start.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.main import create_app
from gmts_core.runs.trainer_log import SCHEMA
from tests.app.api.test_runs_hostile import (
    SECRET,
    assert_line_free,
    get,
    hostile_settings,
    invalid_utf8,
    listing,
    message,
    warmed_up,
)
from tests.app.api_helpers import LiveServer

OK = ('"Q: 1+1=?"', '" 2"', "1")  # a valid sample's prompt, completion and reward (JSON)
DEEP = "[" * 100_000 + "]" * 100_000
BIG = "x" * 10_000


# --- one valid two-step run per format, with step 1's sample given ---


def _write(path: Path, lines: list[str] | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = lines if isinstance(lines, bytes) else "".join(x + "\n" for x in lines).encode()
    path.write_bytes(data)


def _json_lines(fmt: str, step: int, p: str, c: str, r: str) -> list[str]:
    """One step's lines in ``fmt``: a group of the sample (prompt, completion, reward as JSON
    text, written as they are) and a second answer " 3" with reward 0."""
    if fmt == "jsonl":
        return [
            f'{{"prompt": {p}, "completions": [{c}, " 3"], "rewards": [{r}, 0], "step": {step}}}'
        ]
    if fmt == "verl":
        return [
            f'{{"input": {p}, "output": {c}, "score": {r}, "step": {step}}}',
            f'{{"input": {p}, "output": " 3", "score": 0, "step": {step}}}',
        ]
    if fmt == "roll":
        return [
            f'{{"prompt": [{p}, {p}], "responses": [{c}, " 3"], "scores": [{r}, 0], '
            f'"global_step": [{step}, {step}]}}'
        ]
    assert fmt == "areal"
    return [
        f'{{"task_id": 0, "sample_idx": 0, "prompt": {p}, "completion": {c}, "reward": {r}}}',
        f'{{"task_id": 0, "sample_idx": 1, "prompt": {p}, "completion": " 3", "reward": 0}}',
    ]


JSON_FORMATS = ("jsonl", "verl", "roll", "areal")
PARQUET_FORMATS = ("trl", "gmts_trainer_log")
FORMATS = JSON_FORMATS + PARQUET_FORMATS


def run_id(fmt: str, kind: str) -> str:
    return f"{fmt}-{kind}" + (".jsonl" if fmt == "jsonl" else "")


def step_file(root: Path, fmt: str, name: str, step: int) -> Path:
    """Where step ``step`` of run ``name`` in ``fmt`` lives (a JSONL run: the run file)."""
    return {
        "jsonl": root / name,
        "verl": root / name / f"{step}.jsonl",
        "roll": root / name / f"rollout_dump_data.step_{step}.jsonl",
        "areal": root / name / "rollout" / str(step) / "t0.jsonl",
        "trl": root / name / "completions" / f"completions_{step:05d}.parquet",
        "gmts_trainer_log": root / name / "gmts_selection" / f"selection_{step:05d}.parquet",
    }[fmt]


def json_run(root: Path, fmt: str, name: str, first: tuple[str, str, str] = OK) -> None:
    """A two-step run whose step 1 sample is ``first`` (prompt, completion, reward as JSON)."""
    steps = [_json_lines(fmt, 1, *first), _json_lines(fmt, 2, *OK)]
    if fmt == "jsonl":
        _write(root / name, steps[0] + steps[1])
    else:
        for number, lines in enumerate(steps, 1):
            _write(step_file(root, fmt, name, number), lines)


def json_run_bytes(root: Path, fmt: str, name: str, first: bytes) -> None:
    """As :func:`json_run`, step 1's completion the raw bytes ``first`` (inside quotes)."""
    json_run(root, fmt, name, (OK[0], '"@@"', OK[2]))
    path = step_file(root, fmt, name, 1)
    path.write_bytes(path.read_bytes().replace(b"@@", first, 1))


def trl_table(step: int, **columns: Any) -> pa.Table:
    cols: dict[str, Any] = {
        "step": pa.array([step, step]),
        "prompt": pa.array(["Q", "Q"]),
        "completion": pa.array([" 2", " 3"]),
        "r": pa.array([1.0, 0.0]),
        **columns,
    }
    cols.setdefault("advantage", pa.array([0.5, -0.5]))
    cols["advantage"] = cols.pop("advantage")  # TRL writes it last
    return pa.table(cols)


def log_table(step: int, rows: int = 1, **columns: Any) -> pa.Table:
    """A trainer log of step ``step``: ``rows`` tokens of one answer, valid except the
    columns given (a list or array of ``rows`` values; names outside the schema are added)."""
    row: dict[str, Any] = {n: [None] * rows for n in SCHEMA.names}
    row.update(step=[step] * rows, micro_batch=[0] * rows, answer=[0] * rows)
    row.update(position=list(range(rows)), token_id=[5] * rows, method=["gmts"] * rows)
    row.update(prompt=["Q"] * rows, completion=[" 2"] * rows, advantage=[0.5] * rows)
    for name, value in (("entropy", 0.1), ("logprob", -0.1), ("grad_norm", 1.0)):
        row[name] = [value] * rows
    row.update(grad_proxy=[0.5] * rows, weight=[1.0] * rows, selected=[True] * rows)
    row.update(selected_entropy=[False] * rows, selected_gmts=[True] * rows)
    row.update({k: v for k, v in columns.items() if k in SCHEMA.names})
    table = pa.table(row, schema=SCHEMA)
    for name, values in columns.items():
        if name not in SCHEMA.names:
            table = table.append_column(name, values)
    return table


def parquet_run(root: Path, fmt: str, name: str, first: pa.Table | None = None) -> None:
    """A two-step TRL or trainer-log run whose step 1 is ``first`` (default: valid)."""
    table = trl_table if fmt == "trl" else log_table
    for number, data in ((1, first if first is not None else table(1)), (2, table(2))):
        path = step_file(root, fmt, name, number)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, path)


def valid_run(root: Path, fmt: str, name: str) -> None:
    if fmt in JSON_FORMATS:
        json_run(root, fmt, name)
    else:
        parquet_run(root, fmt, name)


def deep_type(depth: int, value: Any) -> pa.Array:
    kind, data = pa.string(), value
    for _ in range(depth):
        kind, data = pa.list_(kind), [data]
    return pa.array([data, data], type=kind)


def parquet_bomb(fmt: str) -> pa.Table:
    """A few KB of file whose strings decode to twice the 2 MB step budget: dictionary pages
    of one 10,000-character value repeated 400 times in a nested column (a list of structs:
    TRL's reader reads every column) or in a trainer log's prompt (it reads its own columns)."""
    if fmt == "trl":
        parts = pa.array([[{"text": BIG}] * 200] * 2, pa.list_(pa.struct([("text", pa.string())])))
        return trl_table(1, parts=parts)
    return log_table(1, rows=400, prompt=[BIG] * 400)


# --- the classes of damage: what is written, and what the server answers ---


@dataclass(frozen=True)
class Case:
    fmt: str
    kind: str
    says: str  # in the refusal's message (and in the listing's reason where the run is refused)
    build: Callable[[Path, Path, str], None]  # (root, outside, run name): writes the run
    swap: Callable[[Path, Path, str], None] | None = None  # damage done after it was read
    status: int = 422

    @property
    def id(self) -> str:
        return run_id(self.fmt, self.kind)


def _valid(fmt: str) -> Callable[[Path, Path, str], None]:
    return lambda root, _, name: valid_run(root, fmt, name)


def _json(fmt: str, first: tuple[str, str, str]) -> Callable[[Path, Path, str], None]:
    return lambda root, _, name: json_run(root, fmt, name, first)


def _latin1(fmt: str) -> Callable[[Path, Path, str], None]:
    return lambda root, _, name: json_run_bytes(root, fmt, name, b"caf\xe9")


def _parquet(fmt: str, **columns: Any) -> Callable[[Path, Path, str], None]:
    """Step 1 a valid table of ``fmt`` but for ``columns`` (each value a function of the
    number of rows: 2 in a TRL step here, 1 token in a trainer log's)."""
    rows = 2 if fmt == "trl" else 1
    table = trl_table if fmt == "trl" else log_table

    def build(root: Path, _: Path, name: str) -> None:
        parquet_run(root, fmt, name, table(1, **{k: f(rows) for k, f in columns.items()}))

    return build


def _fifo(root: Path, fmt: str, name: str) -> None:
    path = step_file(root, fmt, name, 1)
    path.unlink()
    os.mkfifo(path)


def _dev_zero(root: Path, fmt: str, name: str) -> None:
    path = step_file(root, fmt, name, 1)
    path.unlink()
    path.symlink_to("/dev/zero")


def _link_out(root: Path, outside: Path, fmt: str, name: str) -> None:
    """Step 1 of a valid run becomes a link to a valid step outside the root, holding SECRET."""
    valid_run(root, fmt, name)
    if fmt in JSON_FORMATS:
        secret = json.dumps(SECRET)
        json_run(outside, fmt, name, (secret, secret, "1"))
    elif fmt == "trl":
        parquet_run(outside, fmt, name, trl_table(1, prompt=pa.array([SECRET] * 2)))
    else:
        parquet_run(outside, fmt, name, log_table(1, prompt=[SECRET]))
    link = step_file(root, fmt, name, 1)
    link.unlink()
    link.symlink_to(step_file(outside, fmt, name, 1))


def _folder_out(root: Path, outside: Path, fmt: str, name: str) -> None:
    """The folder that holds step 1's file becomes a link to a copy of it outside the root."""
    folder = step_file(root, fmt, name, 1).parent
    away = outside / f"{name}-folder"
    shutil.copytree(folder, away)
    shutil.rmtree(folder)
    folder.symlink_to(away, target_is_directory=True)


UNKNOWN = "unknown run"  # a root entry that leads out of the root is no run (404)


def cases() -> list[Case]:
    out: list[Case] = []
    for fmt in JSON_FORMATS:
        out += [
            Case(fmt, "deep_first_line", "nested too deeply", _json(fmt, (DEEP, *OK[1:]))),
            Case(fmt, "reward_1e400", "out of range", _json(fmt, (*OK[:2], "1e400"))),
            Case(fmt, "reward_10_400", "out of range", _json(fmt, (*OK[:2], "1" + "0" * 400))),
            Case(fmt, "reward_-1e300", "out of range", _json(fmt, (*OK[:2], "-1e300"))),
            Case(fmt, "lone_surrogate", "surrogate", _json(fmt, (OK[0], '"a \\udc80"', OK[2]))),
            Case(fmt, "latin1", "not valid", _latin1(fmt)),
            # a completion of 250,000 empty lists: 750 KB of file, many objects to decode
            Case(
                fmt,
                "nested_bomb",
                "" if fmt == "jsonl" else "GMTS_RUN_MAX_FIELD_CHARS",
                _json(fmt, (OK[0], "[" + ",".join(["[]"] * 250_000) + "]", OK[2])),
                status=422 if fmt == "jsonl" else 413,
            ),
        ]
    for fmt in PARQUET_FORMATS:
        number = "r" if fmt == "trl" else "entropy"
        text = "completion" if fmt == "trl" else "prompt"
        bad_text = (lambda n: invalid_utf8()) if fmt == "trl" else (lambda n: invalid_utf8()[1:])
        out += [
            Case(
                fmt,
                "deep_type",
                "too deeply nested",
                _parquet(fmt, deep=lambda n: deep_type(200, "x")[:n]),
            ),
            Case(
                fmt,
                "value_1e300",
                "out of range",
                _parquet(fmt, **{number: lambda n: pa.array([1e300] * n)}),
            ),
            Case(
                fmt,
                "infinity",
                "out of range",
                _parquet(fmt, advantage=lambda n: pa.array([float("inf")] * n)),
            ),
            Case(fmt, "invalid_utf8", "not valid", _parquet(fmt, **{text: bad_text})),
            Case(
                fmt,
                "nested_bomb",
                "GMTS_RUN_MAX_STEP_BYTES",
                lambda root, _, name, fmt=fmt: parquet_run(root, fmt, name, parquet_bomb(fmt)),
                status=413,
            ),
        ]
    for fmt in FORMATS:
        flat = fmt in ("verl", "roll")  # step files directly in the run folder
        out += [
            Case(
                fmt,
                "fifo",
                "FIFO",
                _valid(fmt),
                swap=lambda root, _, name, fmt=fmt: _fifo(root, fmt, name),
            ),
            Case(
                fmt,
                "dev_zero",
                UNKNOWN if fmt == "jsonl" else "out of the run root",
                _valid(fmt),
                swap=lambda root, _, name, fmt=fmt: _dev_zero(root, fmt, name),
                status=404 if fmt == "jsonl" else 422,
            ),
            Case(
                fmt,
                "link_out",
                UNKNOWN if fmt == "jsonl" else "out of the run root",
                lambda root, outside, name, fmt=fmt: _link_out(root, outside, fmt, name),
                status=404 if fmt == "jsonl" else 422,
            ),
        ]
        if fmt != "jsonl":
            out.append(
                Case(
                    fmt,
                    "folder_out",
                    UNKNOWN if flat else "out of the run root",
                    _valid(fmt),
                    swap=lambda root, outside, name, fmt=fmt: _folder_out(root, outside, fmt, name),
                    status=404 if flat else 422,  # a flat run's folder is the run itself
                )
            )
    return out


CASES = cases()


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tmp_path_factory.mktemp("hostile_formats"), tmp_path_factory.mktemp("outside")


@pytest.fixture(scope="module")
def server(paths: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A server started over an empty root; then a valid run of each format (``verl`` and
    ``logged`` among them, which :func:`warmed_up` reads) and every case's run appear."""
    root, outside = paths
    settings = hostile_settings(tmp_path_factory.mktemp("models"), root)
    with LiveServer(create_app(settings)) as live:
        assert listing(live) == {}
        for fmt in FORMATS:
            valid_run(root, fmt, run_id(fmt, "valid"))
        shutil.copytree(root / "verl-valid", root / "verl")
        shutil.copytree(root / "gmts_trainer_log-valid", root / "logged")
        for case in CASES:
            case.build(root, outside, case.id)
        # a root of hostile names too: an AReaL version folder named with a digit int()
        # refuses, a name no run id may have, a name that is not UTF-8
        _write(
            root / "areal-superscript" / "rollout" / "²" / "t0.jsonl", _json_lines("areal", 1, *OK)
        )
        _write(root / "new\nline.jsonl", _json_lines("jsonl", 1, *OK))
        _write(root / os.fsdecode(b"bad-\xff.jsonl"), _json_lines("jsonl", 1, *OK))
        yield warmed_up(live)


def test_every_entry_is_one_row(server: LiveServer) -> None:
    """One listing of every entry: the valid runs readable, a damaged one either readable
    (its damage is in one step) or unreadable saying why; a link out of the root not listed."""
    runs = listing(server)
    for fmt in FORMATS:
        valid = runs[run_id(fmt, "valid")]
        assert valid["readable"] and valid["format"] == fmt and valid["num_steps"] == 2, valid
    assert "areal-superscript" not in runs or not runs["areal-superscript"]["readable"]
    for name, says in (("new\nline.jsonl", "character"), ("bad-\\xff.jsonl", "not valid UTF-8")):
        assert not runs[name]["readable"] and says in runs[name]["reason"], runs[name]
    for case in CASES:
        if case.says == UNKNOWN and case.swap is None:
            assert case.id not in runs
            continue
        row = runs[case.id]
        if row["readable"]:
            assert row["format"] == case.fmt, row
        else:
            assert row["state"] == "unreadable" and case.says in row["reason"], row


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_hostile_input_is_refused_cleanly(
    paths: tuple[Path, Path], server: LiveServer, case: Case
) -> None:
    root, outside = paths
    if case.swap is not None:  # indexed and read first: the damage comes after
        assert listing(server)[case.id]["readable"]
        assert get(server, f"/v1/runs/{case.id}/steps/2").status_code == 200
        case.swap(root, outside, case.id)
    readers = server.app.state.services.runs.readers
    killed = readers.killed
    readable = case.swap is None and listing(server).get(case.id, {}).get("readable")
    resp = get(server, f"/v1/runs/{case.id}/steps/1")
    assert resp.status_code == case.status, resp.text
    assert case.says in message(resp), message(resp)
    assert SECRET not in resp.text and "PATH=" not in resp.text
    # refused by the reading process itself, within its limits (none was killed)
    assert readers.killed == killed
    if readable:  # the damage is in step 1: the run's step 2 is still served
        assert get(server, f"/v1/runs/{case.id}/steps/2").status_code == 200
    assert_line_free(server)
    assert get(server, f"/v1/runs/{run_id(case.fmt, 'valid')}/steps/1").status_code == 200


def test_the_listing_after_all_of_it_is_whole(server: LiveServer) -> None:
    """After every case (the damage swapped in included), a listing still answers, one row
    for each entry, the valid runs readable, each unreadable one with its reason."""
    runs = listing(server)
    assert all(runs[run_id(fmt, "valid")]["readable"] for fmt in FORMATS)
    assert all(row["reason"] for row in runs.values() if not row["readable"])
