"""Run readers: the real TRL dump and the verl/ROLL/AReaL/JSONL layouts read into the same
steps and groups; bad files fail naming the file and line; pickle dumps are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gmts_core.runs import (
    RunFormatError,
    UnsafeRunFormatError,
    detect_format,
    list_formats,
    open_run,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
FORMATS = {"trl": "trl", "verl": "verl", "roll": "roll", "areal": "areal", "run.jsonl": "jsonl"}


def flat(run_path: Path) -> list[list[tuple[str, list[str], list[float] | None]]]:
    """Per step: (prompt, answers, rewards) of every group, in order."""
    return [
        [(g.prompt, g.answers, g.rewards) for g in step.groups]
        for step in open_run(run_path).iter_steps()
    ]


def test_trl_groups_and_rewards_match_the_parquet_files_exactly() -> None:
    run = open_run(DATA / "trl")
    files = sorted((DATA / "trl" / "completions").glob("completions_*.parquet"))
    assert run.format == "trl" and run.steps == [int(f.stem.split("_")[1]) for f in files]
    for f, step in zip(files, run.iter_steps(), strict=True):
        df = pd.read_parquet(f)
        assert step.step == int(df["step"].iloc[0])
        expected = [
            (
                prompt,
                list(rows["completion"]),
                list(rows["numeric_reward"]),
                list(rows["advantage"]),
            )
            for prompt, rows in df.groupby("prompt", sort=False)
        ]
        got = [(g.prompt, g.answers, g.rewards, g.advantages) for g in step.groups]
        assert got == expected
        assert step.num_answers == len(df)


@pytest.mark.parametrize("name", ["verl", "roll", "areal", "run.jsonl"])
def test_other_formats_read_into_the_same_steps_and_groups(name: str) -> None:
    assert detect_format(DATA / name) == FORMATS[name]
    assert flat(DATA / name) == flat(DATA / "trl")


def test_formats_are_listed_and_a_forced_unknown_one_lists_them() -> None:
    assert set(FORMATS.values()) | {"gmts_trainer_log"} <= set(list_formats())
    with pytest.raises(Exception, match="valid: .*verl"):
        open_run(DATA / "verl", fmt="nope")


def copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    (shutil.copytree if (DATA / name).is_dir() else shutil.copy)(DATA / name, dst)
    return dst


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    run_dir = copy("verl", tmp_path)
    lines = (run_dir / "1.jsonl").read_text().splitlines()
    lines[2] = lines[2][:-5]  # cut inside the object
    (run_dir / "1.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFormatError, match=r"1\.jsonl:3: not valid JSON") as err:
        open_run(run_dir).step(1)
    assert err.value.line == 3 and err.value.path.endswith("1.jsonl")


@pytest.mark.parametrize(
    ("name", "file", "column", "step"),
    [
        ("verl", "2.jsonl", "score", 2),
        ("roll", "rollout_dump_data.step_2.jsonl", "responses", 2),
        ("areal", "rollout/1/task0.jsonl", "reward", 1),
        ("run.jsonl", "", "prompt", 1),
    ],
)
def test_missing_column_names_file_line_and_column(
    tmp_path: Path, name: str, file: str, column: str, step: int
) -> None:
    root = copy(name, tmp_path)
    target = root / file if file else root
    lines = target.read_text().splitlines()
    obj = json.loads(lines[1] if len(lines) > 1 else lines[0])
    del obj[column]
    line = 2 if len(lines) > 1 else 1
    lines[line - 1] = json.dumps(obj)
    target.write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFormatError, match=rf"{target.name}:{line}: missing column '{column}'"):
        open_run(root).step(step)


def test_trl_missing_column_names_the_file(tmp_path: Path) -> None:
    root = copy("trl", tmp_path)
    f = root / "completions" / "completions_00002.parquet"
    pd.read_parquet(f).drop(columns=["completion"]).to_parquet(f)
    with pytest.raises(RunFormatError, match=r"completions_00002\.parquet: missing column"):
        open_run(root).step(2)


@pytest.mark.parametrize("suffix", [".pt", ".pkl"])
def test_pickle_dumps_are_refused_saying_why(tmp_path: Path, suffix: str) -> None:
    dump = tmp_path / f"rollout_data_0{suffix}"
    dump.write_bytes(b"\x80\x04not really a pickle")
    for path in (dump, tmp_path):
        with pytest.raises(UnsafeRunFormatError, match=rf"rollout_data_0\{suffix}: .*pickle") as e:
            open_run(path)
        assert "arbitrary code" in str(e.value)


def test_half_written_last_file_is_tolerated_elsewhere_an_error(tmp_path: Path) -> None:
    root = copy("verl", tmp_path)
    with (root / "3.jsonl").open("a") as f:
        f.write('{"input": "Q: 1+1=?\\nA:", "outp')  # the trainer is still writing
    last = open_run(root).step(3)
    assert flat(DATA / "verl")[2] == [(g.prompt, g.answers, g.rewards) for g in last.groups]
    with (root / "2.jsonl").open("a") as f:
        f.write('{"input": "x", "outp')
    with pytest.raises(RunFormatError, match=r"2\.jsonl:13: not valid JSON"):
        open_run(root).step(2)


def test_half_written_last_parquet_is_dropped(tmp_path: Path) -> None:
    root = copy("trl", tmp_path)
    f = root / "completions" / "completions_00004.parquet"
    f.write_bytes((root / "completions" / "completions_00003.parquet").read_bytes()[:200])
    assert open_run(root).steps == [1, 2, 3]


def test_jsonl_steps_load_lazily_from_their_offsets(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    lines = [
        {"prompt": "a", "completions": ["1", "2"], "rewards": [0, 1]},  # no step: step = line 1
        {"step": 5, "prompt": "b", "completions": ["3"], "rewards": [1]},
        {"step": 5, "prompt": "c", "completions": ["4"], "reference": "4"},
        {"step": 7, "prompt": "d", "answers": ["5"], "rewards": [0]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    run = open_run(path)
    assert run.steps == [1, 5, 7]
    assert [g.prompt for g in run.step(5).groups] == ["b", "c"]
    assert run.step(5).groups[1].rewards is None and run.step(5).groups[1].reference == "4"
    assert run.step(7).groups[0].answers == ["5"]
    path.write_text(path.read_text() + json.dumps({**lines[1], "prompt": "e"}) + "\n")
    with pytest.raises(RunFormatError, match=r"r\.jsonl:5: step 5 appears again"):
        open_run(path)


def test_unknown_folder_lists_known_formats(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(RunFormatError, match="known formats: .*trl.*verl"):
        open_run(tmp_path)


def test_trl_chat_completions_read_as_text(tmp_path: Path) -> None:
    """TRL logs chat prompts and completions as message lists; extra columns are kept."""
    folder = tmp_path / "completions"
    folder.mkdir()
    user = [{"role": "user", "content": "Q: 2+2=?"}]
    df = pd.DataFrame(
        {
            "step": [4, 4, 4],
            "prompt": [user, user, [{"role": "user", "content": "Q: 3+3=?"}]],
            "completion": [[{"role": "assistant", "content": c}] for c in (" 4", " 5", " 6")],
            "acc_reward": [1.0, 0.0, 1.0],
            "fmt_reward": [0.5, None, 0.5],
            "note": ["a", "b", "c"],
            "advantage": [0.7, -0.7, 0.0],
        }
    )
    df.to_parquet(folder / "completions_00004.parquet")
    step = open_run(tmp_path).step(4)
    first, second = step.groups
    assert (first.prompt, first.chat, first.answers) == ("Q: 2+2=?", True, [" 4", " 5"])
    # acc_reward alone and acc_reward + fmt_reward both reproduce the advantage: it says so
    assert first.rewards == [1.0, 0.0] and "cannot tell" in step.notes[0]
    assert first.extra["note"] == ["a", "b"] and first.advantages == [0.7, -0.7]
    # the run's trainer_state.json names both reward functions: their sum, NaN skipped
    state = {
        "log_history": [{"step": 4, "rewards/acc_reward/mean": 0.6, "rewards/fmt_reward/mean": 0.5}]
    }
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    step = open_run(tmp_path).step(4)
    first, second = step.groups
    assert first.rewards == [1.5, 0.0] and second.rewards == [1.5]
    assert "named by trainer_state.json" in step.notes[0]


def test_every_file_of_a_duplicated_step_is_named(tmp_path: Path) -> None:
    """Files that all hold step 1 are refused naming each (past 8, the rest counted); an
    entry named like a step that is no regular file stays a step, refused when read."""
    import os

    line = json.dumps({"input": "Q", "output": " 2", "score": 1.0}) + "\n"
    run = tmp_path / "run"
    run.mkdir()
    for name in ("1.jsonl", "01.jsonl", "001.jsonl", "2.jsonl"):
        (run / name).write_text(line)
    with pytest.raises(
        RunFormatError, match=r"step 1 is in 3 files, 001\.jsonl, 01\.jsonl and 1\.jsonl"
    ):
        open_run(run)
    for zeros in range(3, 12):
        (run / ("0" * zeros + "1.jsonl")).write_text(line)
    with pytest.raises(RunFormatError, match=r"step 1 is in 12 files, .* and 4 more: keep one"):
        open_run(run)
    shutil.rmtree(run)
    run.mkdir()
    (run / "1.jsonl").write_text(line)
    os.mkfifo(run / "2.jsonl")
    opened = open_run(run)
    assert opened.steps == [1, 2]
    with pytest.raises(RunFormatError, match="a FIFO, not a file"):
        opened.step(2)
