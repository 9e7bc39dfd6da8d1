"""The token log's one writer (``write_log_step``, beside its reader), which TRL's and verl's
loggers both call: rows in SCHEMA, any schema metadata dropped, every row's step set, and the
file opens as a run with the registered reader."""

from __future__ import annotations

import inspect
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gmts_core.integrations import trl_log
from gmts_core.runs import open_run
from gmts_core.runs.trainer_log import FOLDER, SCHEMA, TOKEN_COLUMNS, write_log_step


def rows(answers: int, prompt: str, micro_batch: int) -> pa.Table:
    n = 2 * answers
    values = {
        "step": [0] * n,
        "micro_batch": [micro_batch] * n,
        "answer": [i // 2 for i in range(n)],
        "position": [i % 2 for i in range(n)],
        "prompt": [prompt] * n,
        "completion": [f"answer {i // 2}" for i in range(n)],
        "token_id": [7] * n,
        "entropy": [0.5] * n,
        "logprob": [-0.1] * n,
        "grad_norm": [0.9] * n,
        "grad_proxy": [0.1] * n,
        "advantage": [1.0 if i < 2 else -1.0 for i in range(n)],
        "weight": [0.25] * n,
        "omega": [None] * n,
        "method": ["gmts"] * n,
        "selected": [i % 2 == 0 for i in range(n)],
        "selected_entropy": [True] * n,
        "selected_gmts": [i % 2 == 0 for i in range(n)],
    }
    assert list(values) == [name for name, _ in TOKEN_COLUMNS]
    return pa.table(values, schema=SCHEMA.with_metadata({b"pandas": b"{}"}))


def test_one_writer_for_every_trainer_and_the_reader_opens_its_file(tmp_path: Path) -> None:
    folder = tmp_path / FOLDER
    assert write_log_step(folder, [], 3) is None and not folder.exists()
    path = write_log_step(folder, [rows(2, "p0", 0), rows(2, "p1", 1)], 12)
    assert path == folder / "selection_00012.parquet"
    assert not list(folder.glob("*.tmp"))
    assert pq.read_schema(path).metadata is None  # SCHEMA alone, whoever built the rows
    table = pq.read_table(path)
    assert table.schema.equals(SCHEMA) and set(table.column("step").to_pylist()) == {12}
    run = open_run(tmp_path)
    assert run.steps == [12]
    (step,) = list(run.iter_steps())
    assert [g.prompt for g in step.groups] == ["p0", "p1"]
    # the TRL and verl loggers write through it, not a copy of it
    for logger in (trl_log.SelectionLogger,):
        assert "write_log_step(" in inspect.getsource(logger.flush)
    verl_log = (Path(trl_log.__file__).parent / "verl_log.py").read_text(encoding="utf-8")
    assert "write_log_step(" in verl_log and "write_table" not in verl_log
