"""Run readers work inside a size budget checked while streaming: an over-long line is refused
after reading the limit (never read whole), a parquet file by its footer and its longest cell
(before Python strings exist), a folder listing stops at its limit; every refusal names the
limit and the setting that raises it. Small limits here; the 50 MB files are in
tests/app/api/test_runs_limits.py (through a real server)."""

from __future__ import annotations

import io
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gmts_core.progress import Cancelled, CancelToken, cancellable
from gmts_core.runs import CLI_LIMITS, RunLimitError, RunLimits, open_run
from gmts_core.runs.limits import bounded_lines, scan_folder

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
SMALL = RunLimits(
    max_file_bytes=1_000_000,
    max_line_bytes=4_000,
    max_step_bytes=200_000,
    max_field_chars=1_000,
    max_group_answers=16,
    max_step_rows=64,
    max_folder_entries=50,
    max_run_steps=20,
)


class CountingReader(io.BytesIO):
    """A file that counts the bytes handed out: proves a line is not read whole."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.handed = 0

    def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        out = super().readline(size)
        self.handed += len(out)
        return out


def test_a_long_line_is_refused_after_reading_the_limit_only() -> None:
    f = CountingReader(b'{"a": 1}\n' + b"x" * 1_000_000 + b"\n")
    with pytest.raises(RunLimitError) as err:
        list(bounded_lines(f, SMALL, Path("r.jsonl")))
    assert f.handed <= 9 + SMALL.max_line_bytes + 1
    assert err.value.limit == "max_line_bytes" and err.value.setting == "GMTS_RUN_MAX_LINE_BYTES"
    assert "r.jsonl:2" in str(err.value) and "4,000" in str(err.value)


def test_cli_limits_name_their_options() -> None:
    assert CLI_LIMITS.setting("max_field_chars") == "--run-max-field-chars"
    assert all(getattr(CLI_LIMITS, n) > getattr(RunLimits(), n) for n in ("max_line_bytes",))


def write_run(kind: str, root: Path) -> Path:
    """A run of format ``kind`` whose first step holds one oversized item."""
    big = " 85" * 2_000  # 6,000 chars, 6 kB: over SMALL's line and field limits
    if kind == "jsonl":
        path = root / "r.jsonl"
        ok = {"prompt": "a", "completions": ["1", "2"], "rewards": [0, 1], "step": 1}
        path.write_text(json.dumps(ok) + "\n" + json.dumps({**ok, "completions": [big, "2"]}))
        return path
    if kind == "verl":
        (root / "v").mkdir()
        rows = [{"input": "Q", "output": o, "score": 1, "step": 1} for o in ("1", big)]
        (root / "v" / "1.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        return root / "v"
    if kind == "roll":
        (root / "r").mkdir()
        obj = {
            "prompt": ["Q", "Q"],
            "responses": ["1", big],
            "scores": [1, 0],
            "global_step": [1, 1],
        }
        (root / "r" / "rollout_dump_data.step_1.jsonl").write_text(json.dumps(obj) + "\n")
        return root / "r"
    if kind == "areal":
        (root / "a" / "rollout" / "1").mkdir(parents=True)
        rows = [{"task_id": 0, "prompt": "Q", "completion": c, "reward": 1} for c in ("1", big)]
        text = "\n".join(json.dumps(r) for r in rows) + "\n"
        (root / "a" / "rollout" / "1" / "t0.jsonl").write_text(text)
        return root / "a"
    if kind == "trl":
        (root / "t" / "completions").mkdir(parents=True)
        table = pa.table(
            {"step": [1, 1], "prompt": ["Q", "Q"], "completion": ["1", big], "r": [1.0, 0.0]}
        )
        pq.write_table(table, root / "t" / "completions" / "completions_00001.parquet")
        return root / "t"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["jsonl", "verl", "roll", "areal"])
def test_every_jsonl_reader_refuses_a_long_line_naming_the_setting(
    tmp_path: Path, kind: str
) -> None:
    path = write_run(kind, tmp_path)
    with pytest.raises(RunLimitError, match=r"max_line_bytes = 4,000 \(raise it with "):
        open_run(path, limits=SMALL).step(1)


@pytest.mark.parametrize("kind", ["jsonl", "verl", "roll", "areal", "trl"])
def test_every_reader_refuses_a_long_field_before_tokenizing(tmp_path: Path, kind: str) -> None:
    path = write_run(kind, tmp_path)
    limits = replace(SMALL, max_line_bytes=100_000)
    with pytest.raises(RunLimitError, match=r"6,000 characters, over the limit max_field_chars"):
        open_run(path, limits=limits).step(1)
    assert open_run(path, limits=replace(limits, max_field_chars=6_000)).step(1).groups


def test_a_huge_parquet_cell_is_measured_in_arrow_inside_chat_messages(tmp_path: Path) -> None:
    folder = tmp_path / "completions"
    folder.mkdir()
    msg = [{"role": "assistant", "content": "x" * 5_000}]
    table = pa.table(
        {
            "step": [1],
            "prompt": [[{"role": "user", "content": "Q"}]],
            "completion": [msg],
            "advantage": [0.0],
        }
    )
    pq.write_table(table, folder / "completions_00001.parquet")
    with pytest.raises(RunLimitError, match=r"column 'completion' has 5,000 characters"):
        open_run(tmp_path, limits=SMALL).step(1)


def test_a_parquet_file_is_refused_by_its_footer_or_its_expanded_strings(tmp_path: Path) -> None:
    folder = tmp_path / "completions"
    folder.mkdir()
    f = folder / "completions_00001.parquet"
    n = 100
    texts = [f"{i:03d}" + "y" * 897 for i in range(n)]  # distinct: plain pages, honest sizes
    table = pa.table({"step": [1] * n, "prompt": ["Q"] * n, "completion": texts, "r": [1.0] * n})
    pq.write_table(table, f, compression="zstd", use_dictionary=False)
    with pytest.raises(RunLimitError, match=r"100 rows, over the limit max_step_rows = 64"):
        open_run(tmp_path, limits=SMALL).step(1)
    bytes_only = replace(SMALL, max_step_rows=1_000, max_step_bytes=50_000, max_group_answers=999)
    with pytest.raises(RunLimitError, match=r"bytes once decoded, over the limit max_step_bytes"):
        open_run(tmp_path, limits=bytes_only).step(1)
    # one value repeated: a dictionary page keeps the footer small; the expanded size says no
    table = pa.table({"step": [1] * n, "prompt": ["Q"] * n, "completion": ["y" * 900] * n})
    pq.write_table(table, f, compression="zstd")
    with pytest.raises(RunLimitError, match=r"text cells expand to 90,100 bytes or more"):
        open_run(tmp_path, limits=bytes_only).step(1)


def test_too_many_answers_in_a_group_and_rows_in_a_step(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"prompt": "a", "completions": ["1"] * 17, "rewards": [0] * 17}))
    with pytest.raises(RunLimitError, match=r"17 answers, over the limit max_group_answers = 16"):
        open_run(path, limits=SMALL).step(1)
    verl = tmp_path / "v"
    verl.mkdir()
    rows = [{"input": f"Q{i}", "output": "1", "score": 1, "step": 1} for i in range(65)]
    (verl / "1.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(RunLimitError, match=r"1\.jsonl:65: 65 lines or more, over .*max_step_rows"):
        open_run(verl, limits=SMALL).step(1)


def test_file_sizes_are_checked_before_reading(tmp_path: Path) -> None:
    verl = tmp_path / "v"
    verl.mkdir()
    with (verl / "1.jsonl").open("wb") as f:
        f.truncate(300_000)  # sparse: nothing to read, only its size says no
    with pytest.raises(RunLimitError, match=r"300,000 bytes, over the limit max_step_bytes"):
        open_run(verl, limits=SMALL).step(1)


def test_a_folder_listing_stops_at_its_limit(tmp_path: Path) -> None:
    for i in range(60):
        (tmp_path / f"{i}.txt").touch()
    with pytest.raises(RunLimitError, match=r"more than 50 entries.*GMTS_RUN_MAX_FOLDER_ENTRIES"):
        scan_folder(tmp_path, SMALL)
    with pytest.raises(RunLimitError, match="max_folder_entries"):
        open_run(tmp_path, limits=SMALL)  # detection lists the folder: refused, not walked


def test_reading_stops_when_the_work_is_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    ok = {"prompt": "a", "completions": ["1", "2"], "rewards": [0, 1], "step": 1}
    path.write_text("\n".join(json.dumps(ok) for _ in range(50)) + "\n")
    token = CancelToken()
    token.cancel("the client disconnected")
    with cancellable(token), pytest.raises(Cancelled, match="disconnected"):
        open_run(path)


def test_the_shipped_runs_fit_the_server_defaults() -> None:
    for name in os.listdir(DATA):
        run = open_run(DATA / name)
        assert list(run.iter_steps()), name


def test_trl_dump_copy_is_unchanged_by_the_checks(tmp_path: Path) -> None:
    shutil.copytree(DATA / "trl", tmp_path / "trl")
    a = [g.answers for s in open_run(tmp_path / "trl").iter_steps() for g in s.groups]
    b = [
        g.answers for s in open_run(DATA / "trl", limits=CLI_LIMITS).iter_steps() for g in s.groups
    ]
    assert a == b


def test_a_jsonl_run_with_too_many_steps_is_refused_while_indexing(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    line = {"prompt": "a", "completions": ["1"], "rewards": [0]}  # no step: one per line
    path.write_text("\n".join(json.dumps(line) for _ in range(25)) + "\n")
    with pytest.raises(RunLimitError, match=r"r\.jsonl:21: 21 steps, over .*max_run_steps = 20"):
        open_run(path, limits=SMALL)


def test_every_limit_has_a_server_setting_and_a_cli_option() -> None:
    import app.cli.analyze_run  # noqa: F401  (registers the command)
    from app.cli._app import cli
    from app.core.config import Settings
    from gmts_core.runs import LIMIT_NAMES

    settings = Settings()
    assert settings.run_limits == RunLimits()  # the settings' defaults are the library's
    help_text = CliRunner().invoke(cli, ["analyze-run", "--help"], env={"COLUMNS": "300"}).output
    for name in LIMIT_NAMES:
        assert hasattr(settings, f"run_{name}"), name
        assert CLI_LIMITS.setting(name) in help_text, name
        assert getattr(CLI_LIMITS, name) >= getattr(RunLimits(), name), name
