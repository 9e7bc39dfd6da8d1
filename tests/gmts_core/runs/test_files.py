"""Opening run files (gmts_core.runs.files) and validating their values (values.py): only a
regular file inside the root is opened, and bad values are refused naming the field."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from gmts_core.runs import RunLimitError, RunLimits
from gmts_core.runs.errors import RunFormatError, UnsafeRunFileError
from gmts_core.runs.files import _open_folder_chain, open_run_file
from gmts_core.runs.values import as_float, check_json


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "run").mkdir(parents=True)
    (tmp_path / "root" / "run" / "1.jsonl").write_text("{}\n")
    (tmp_path / "outside.jsonl").write_text("secret\n")
    return tmp_path / "root"


def limits(root: Path) -> RunLimits:
    return RunLimits(root=os.path.realpath(root))


def test_a_regular_file_inside_the_root_is_opened(root: Path) -> None:
    with open_run_file(root / "run" / "1.jsonl", limits(root)) as f:
        assert f.read() == b"{}\n"


def test_a_fifo_is_refused_without_blocking(root: Path) -> None:
    os.mkfifo(root / "run" / "2.jsonl")
    os.symlink(root / "run" / "2.jsonl", root / "run" / "3.jsonl")
    for name in ("2.jsonl", "3.jsonl"):  # directly and through a link
        with pytest.raises(UnsafeRunFileError, match="a FIFO, not a file"):
            open_run_file(root / "run" / name, limits(root))


def test_links_out_of_the_root_are_refused(root: Path) -> None:
    os.symlink(root.parent / "outside.jsonl", root / "run" / "4.jsonl")
    os.symlink("/dev/null", root / "run" / "5.jsonl")
    os.symlink(root.parent, root / "run" / "up")
    for path in (root / "run" / "4.jsonl", root / "run" / "5.jsonl", root / "run" / "up" / "x"):
        with pytest.raises(UnsafeRunFileError):
            open_run_file(path, limits(root))
    # without a root (the CLI: a person's own files) a link is followed, a device refused
    with open_run_file(root / "run" / "4.jsonl", RunLimits()) as f:
        assert f.read() == b"secret\n"
    with pytest.raises(UnsafeRunFileError, match="character device"):
        open_run_file(root / "run" / "5.jsonl", RunLimits())


def test_a_folder_swapped_for_a_link_after_resolving_is_not_followed(root: Path) -> None:
    # what open_run_file does after resolving, with "run" turned into a link meanwhile
    os.rename(root / "run", root / "real")
    os.symlink(root / "real", root / "run")
    with pytest.raises(UnsafeRunFileError, match="changed into a link"):
        _open_folder_chain(os.path.realpath(root), ["run"], root / "run")


def test_the_size_budget_is_checked_on_the_open_file(root: Path) -> None:
    small = replace(limits(root), max_file_bytes=2)
    with pytest.raises(RunLimitError, match="max_file_bytes"):
        open_run_file(root / "run" / "1.jsonl", small)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"a": "\ud800"}, "'a' holds a lone surrogate"),
        ({"\udc80": 1}, "key that is not valid Unicode"),
        ({"rewards": [0, 10**400]}, r"'rewards\[1\]' is an integer out of range"),
        ({"a": [[[[[]]]]] * 1}, None),
    ],
)
def test_check_json_refuses_bad_strings_and_integers(value: object, says: str | None) -> None:
    if says is None:
        assert check_json(value, "f", 1) is value
    else:
        with pytest.raises(RunFormatError, match=says):
            check_json(value, "f", 1)


def test_check_json_refuses_deep_nesting_without_recursion() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RunFormatError, match="nests deeper than 64"):
        check_json({"x": deep}, "f", 1)


@pytest.mark.parametrize("value", [1e300, -1e300, 10**400, float("inf")])
def test_rewards_out_of_range_are_refused(value: object) -> None:
    with pytest.raises(RunFormatError, match="reward .* out of range"):
        as_float(value, "reward", "f", 3)


@pytest.mark.parametrize("value", ["1", "0", "1e400", "Infinity", True, False, [1], {"r": 1}])
def test_a_reward_is_a_number_of_its_own_type(value: object) -> None:
    """Text and booleans are a writer's bug, never read as numbers."""
    with pytest.raises(RunFormatError, match="reward must be a number"):
        as_float(value, "reward", "f", 3)


def test_rewards_in_range_and_abstentions_are_kept() -> None:
    assert as_float(None, "reward", "f", 1) != as_float(None, "reward", "f", 1)  # NaN
    assert as_float(0.5, "reward", "f", 1) == 0.5 and as_float(1, "reward", "f", 1) == 1.0


def test_a_parquet_step_of_thousands_of_row_groups_is_refused_by_its_footer(
    tmp_path: Path,
) -> None:
    """16,000 one-row groups (within the row budget) would cost a reading per group: the
    footer alone refuses them, naming the count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gmts_core.runs.limits import MAX_ROW_GROUPS, check_parquet_footer

    path = tmp_path / "completions.parquet"
    pq.write_table(pa.table({"prompt": ["q"] * 16_000}), path, row_group_size=1)
    with pytest.raises(RunFormatError, match=f"16,000 row groups; .* at most {MAX_ROW_GROUPS:,}"):
        check_parquet_footer(pq.read_metadata(path), ["prompt"], RunLimits(), path)
    few = tmp_path / "few.parquet"
    pq.write_table(pa.table({"prompt": ["q"] * 16_000}), few, row_group_size=4_000)
    check_parquet_footer(pq.read_metadata(few), ["prompt"], RunLimits(), few)


def test_a_folder_named_as_a_step_file_is_a_step_refused_when_read(tmp_path: Path) -> None:
    """``9.jsonl/`` in a verl run: counted (the run says it has step 9) and refused when read,
    naming what it is, never silently left out."""
    import shutil

    from gmts_core.runs import open_run

    data = Path(__file__).resolve().parents[2] / "data" / "runs" / "verl"
    run = tmp_path / "run"
    shutil.copytree(data, run)
    (run / "9.jsonl").mkdir()
    opened = open_run(run, limits=RunLimits(root=str(tmp_path)))
    assert opened.steps[-1] == 9
    with pytest.raises(UnsafeRunFileError, match="a folder, not a file"):
        opened.step(9)


def test_a_key_twice_in_one_jsonl_object_is_refused(tmp_path: Path) -> None:
    """Which of two values the writer meant cannot be told: the line is refused, naming the
    key, not read with the last value."""
    from gmts_core.runs import open_run

    run = tmp_path / "run.jsonl"
    run.write_text('{"prompt": "Q", "completion": "a", "reward": 1, "reward": 0, "step": 1}\n')
    with pytest.raises(RunFormatError, match="the key 'reward' appears twice"):
        open_run(run, limits=RunLimits(root=str(tmp_path))).step(1)


def test_a_whole_parquet_step_whose_footer_cannot_be_read_is_named_not_dropped(
    tmp_path: Path,
) -> None:
    """A TRL step with an extra column nested 60 lists deep: pyarrow cannot read its footer,
    but the file is whole (it ends with the footer's magic), so the step is listed and reading
    it says why, instead of the run having "no steps" (a half-written file is left out)."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from gmts_core.runs import open_run

    run = tmp_path / "trl"
    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "runs" / "trl", run)
    files = sorted((run / "completions").glob("*.parquet"))
    table = pq.read_table(files[-1])
    kind: pa.DataType = pa.string()
    value: object = "x"
    for _ in range(60):
        kind, value = pa.list_(kind), [value]
    pq.write_table(table.append_column("deep", pa.array([value] * len(table), kind)), files[-1])
    for f in files[:-1]:
        f.unlink()
    opened = open_run(run, limits=RunLimits(root=str(tmp_path)))
    assert len(opened.steps) == 1
    with pytest.raises(RunFormatError, match="too deeply nested"):
        opened.step(opened.steps[0])
    half = files[-1].read_bytes()[:-100]  # still being written: no footer yet
    files[-1].write_bytes(half)
    with pytest.raises(RunFormatError, match="no steps found"):
        open_run(run, limits=RunLimits(root=str(tmp_path)))
