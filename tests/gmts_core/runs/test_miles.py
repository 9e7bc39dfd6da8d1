"""miles' per-token Parquet mirror (dashboard_columns/rollout_N.parquet, written by the same polars
calls as miles: scripts/make_miles_fixture.py) read as steps and groups, without ever loading
its pickle (.pt) files; malformed and oversized mirrors refused naming the file and row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.model.loading import load_model
from gmts_core.runs import (
    RunFormatError,
    RunLimitError,
    RunLimits,
    UnsafeRunFormatError,
    detect_format,
    open_run,
)
from gmts_core.runs.analysis import AnalysisConfig, analyze_step

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
MILES = DATA / "miles"


def test_the_mirror_is_read_as_miles_wrote_it() -> None:
    run = open_run(MILES)
    assert detect_format(MILES) == "miles" and run.format == "miles" and run.steps == [0, 1, 2]
    for step in run.iter_steps():
        df = pd.read_parquet(MILES / "dashboard_columns" / f"rollout_{step.step}.parquet")
        got = {
            index: (g.prompt_token_ids, ids, lp, mask)
            for g in step.groups
            for index, ids, lp, mask in zip(
                g.extra["sample_index"],
                g.token_ids or [],
                g.token_columns["rollout_log_probs"],
                g.token_columns["loss_mask"],
                strict=True,
            )
        }
        assert sorted(got) == sorted(df["sample_index"])
        for row in df.itertuples():
            cut = row.total_length - row.response_length
            prompt, answer, logprobs, mask = got[row.sample_index]
            assert prompt == list(row.tokens[:cut]) and answer == list(row.tokens[cut:])
            assert logprobs == pytest.approx(list(row.rollout_log_probs))
            assert mask == list(row.loss_mask)
        assert all(g.texts_from_ids and g.prompt == "" for g in step.groups)


def test_groups_rewards_and_advantages_come_from_the_dashboards_summary() -> None:
    """Rollouts 0 and 1 were summarised by miles' dashboard: its group index, raw reward and
    mean advantage; they are the TRL run's own (the same samples)."""
    run = open_run(MILES)
    for step in run.iter_steps([0, 1]):
        trl = pd.read_parquet(
            DATA / "trl" / "completions" / f"completions_{step.step + 1:05d}.parquet"
        )
        expected = [
            (list(rows["numeric_reward"]), list(rows["advantage"]))
            for _, rows in trl.groupby("prompt", sort=False)
        ]
        got = [(g.rewards, g.advantages) for g in step.groups]
        assert [r for r, _ in got] == [r for r, _ in expected]
        for (_, adv), (_, want) in zip(got, expected, strict=True):
            assert adv == pytest.approx(want)
        assert all(len(g.extra["mean_entropy"]) == g.size for g in step.groups)


def test_without_the_summary_answers_group_by_prompt_tokens_and_have_no_rewards() -> None:
    step = open_run(MILES).step(2)
    df = pd.read_parquet(MILES / "dashboard_columns" / "rollout_2.parquet")
    cols = zip(df.tokens, df.total_length, df.response_length, strict=True)
    prompts = [tuple(t[: n - r]) for t, n, r in cols]
    assert [g.size for g in step.groups] == [prompts.count(p) for p in dict.fromkeys(prompts)]
    assert all(g.rewards is None and g.advantages is None for g in step.groups)


def test_a_step_is_analysed_on_its_exact_token_ids() -> None:
    lm = load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu", dtype="float32")
    step = open_run(MILES).step(0)
    config = AnalysisConfig(methods=("entropy", "gmts"))
    report, result = analyze_step(lm, step, config)
    assert report.num_groups == 3 and report.num_answers == 12
    assert result.token_ids == [ids for g in step.groups for ids in (g.token_ids or [])]
    first = step.groups[0]
    assert first.prompt_token_ids is not None
    assert result.groups[0].prompt == lm.tokenizer.decode(first.prompt_token_ids)
    assert report.reward_mean == pytest.approx(
        sum(r for g in step.groups for r in g.rewards or []) / 12
    )


PAYLOAD = b"cos\nsystem\n(S'touch pickle-was-loaded'\ntR."  # would run a command if unpickled


def test_pickle_dumps_are_refused_and_never_loaded(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    (dump / "rollout_data").mkdir(parents=True)
    (dump / "train_data").mkdir()
    (dump / "rollout_data" / "0.pt").write_bytes(PAYLOAD)
    (dump / "train_data" / "0_0.pt").write_bytes(PAYLOAD)
    # without the mirror the rollout pickles are slime's format, unpickled only with
    # torch.load(weights_only=True): a payload needing full pickle is refused, never run
    run = open_run(dump)
    assert run.format == "slime"
    with pytest.raises(UnsafeRunFormatError, match=r"0\.pt: .*weights_only=True"):
        run.step(0)
    (dump / "rollout_data" / "0.pt").unlink()  # the train side alone: refused as pickle
    with pytest.raises(UnsafeRunFormatError, match=r"0_0\.pt: .*pickle.*dashboard_columns") as err:
        open_run(dump)
    assert "arbitrary code" in str(err.value) and "miles" in str(err.value)
    (dump / "rollout_data" / "0.pt").write_bytes(PAYLOAD)
    with pytest.raises(UnsafeRunFormatError):
        open_run(dump / "rollout_data" / "0.pt")
    shutil.copytree(MILES / "dashboard_columns", dump / "dashboard_columns")  # the mirror: read
    run = open_run(dump)
    assert run.format == "miles" and list(run.iter_steps())
    assert not (tmp_path / "pickle-was-loaded").exists() and not Path("pickle-was-loaded").exists()


def rewrite(tmp_path: Path, change) -> Path:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    shutil.copytree(MILES, run)
    path = run / "dashboard_columns" / "rollout_0.parquet"
    table = change(pq.read_table(path))
    pq.write_table(table, path, row_group_size=8)
    return run


def set_column(table: pa.Table, name: str, values: list) -> pa.Table:  # type: ignore[type-arg]
    i = table.column_names.index(name)
    return table.set_column(i, name, pa.array(values, type=table.schema.field(name).type))


def edit(table: pa.Table, name: str, row: int, fn) -> pa.Table:  # type: ignore[no-untyped-def]
    values = table.column(name).to_pylist()
    values[row] = fn(values[row])
    return set_column(table, name, values)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop_columns(["tokens"]), "missing column 'tokens'"),
        (
            lambda t: edit(t, "sample_index", 2, lambda v: None),
            "row 3: column 'sample_index' is null",
        ),
        (lambda t: edit(t, "tokens", 4, lambda v: v[:-1]), "row 5: 'tokens' does not hold"),
        (lambda t: edit(t, "response_length", 1, lambda v: -1), "row 2: 'response_length' is not"),
        (lambda t: edit(t, "loss_mask", 9, lambda v: v + [1]), "row 10: 'loss_mask' does not"),
        (
            lambda t: edit(t, "rollout_log_probs", 0, lambda v: [float("nan")] * len(v)),
            "not finite",
        ),
        (lambda t: edit(t, "loss_mask", 0, lambda v: [7] * len(v)), "is not 0 or 1"),
        (lambda t: edit(t, "tokens", 0, lambda v: [-5] * len(v)), "token id"),
    ],
)
def test_malformed_mirrors_are_refused_naming_the_row(
    tmp_path: Path,
    change,
    message: str,  # type: ignore[no-untyped-def]
) -> None:
    run = rewrite(tmp_path, change)
    with pytest.raises(RunFormatError, match=message) as err:
        open_run(run).step(0)
    assert "rollout_0.parquet" in str(err.value)


def test_oversized_mirrors_are_refused_by_their_limits(tmp_path: Path) -> None:
    with pytest.raises(RunLimitError, match="max_step_rows"):
        open_run(MILES, limits=RunLimits(max_step_rows=8)).step(0)
    with pytest.raises(RunLimitError, match="max_step_bytes"):
        open_run(MILES, limits=RunLimits(max_step_bytes=2_000)).step(0)
    with pytest.raises(RunLimitError, match="max_group_answers"):
        open_run(MILES, limits=RunLimits(max_group_answers=3)).step(2)


def test_a_summary_of_other_samples_is_not_used(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(MILES, run)
    cache = run / "dashboard" / "cache" / "rollout_0.parquet"
    table = pq.read_table(cache)
    pq.write_table(set_column(table, "sample_index", [i + 1000 for i in range(len(table))]), cache)
    assert all(g.rewards is None for g in open_run(run).step(0).groups)


def test_a_half_written_last_mirror_is_left_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(MILES, run)
    data = (run / "dashboard_columns" / "rollout_2.parquet").read_bytes()
    (run / "dashboard_columns" / "rollout_3.parquet").write_bytes(data[: len(data) // 2])
    assert open_run(run).steps == [0, 1, 2]
