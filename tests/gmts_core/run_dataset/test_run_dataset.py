"""The analysed-run dataset: the schema round trip from a real analysis, every query against a
naive pandas/numpy answer, the files and row groups each query reads, and a growing run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from gmts_core import (
    DEMO_MODEL_DIR,
    AnalysisConfig,
    GroupInput,
    RewardSpec,
    SamplingConfig,
    analyze,
    load_model,
)
from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset import (
    ANSWER_ORDERS,
    TOP_K,
    TOP_ORDERS,
    VERSION,
    AnalysedRun,
    StepColumns,
    check_manifest,
    schema,
    write_step,
)
from gmts_core.run_dataset.schema import ROW_GROUP_ROWS, step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step

METHODS = ("entropy", "gmts", "random")


@pytest.fixture(scope="module")
def analysed():
    lm = load_model(DEMO_MODEL_DIR, device="cpu", dtype="float32")
    problems = [(47, 38), (12, 5), (83, 9), (40, 40), (6, 7)]
    groups = [
        GroupInput(
            f"Q: {a}+{b}=?\nA:",
            sampling=SamplingConfig(num_samples=6, seed=a),
            reward=RewardSpec("numeric", str(a + b)),
        )
        for a, b in problems
    ]
    return analyze(lm, groups, AnalysisConfig(ratio=0.2, methods=METHODS))


@pytest.fixture
def dataset(tmp_path: Path, analysed) -> Path:
    write_manifest(tmp_path, METHODS, {"ratio": 0.2})
    write_step(tmp_path, StepColumns.from_result(7, analysed))
    return tmp_path


def test_tables_have_the_documented_schema_and_version(dataset: Path) -> None:
    for table in ("tokens", "answers", "steps", "top"):
        written = pq.read_schema(step_file(dataset, table, 7))
        assert written.equals(schema(table, METHODS), check_metadata=False), table
        meta = pq.ParquetFile(step_file(dataset, table, 7)).metadata
        assert meta.row_group(0).column(0).compression == "ZSTD"
    manifest = check_manifest(dataset)
    assert manifest.version == VERSION and manifest.methods == METHODS
    doc = json.loads((dataset / "dataset.json").read_text())
    assert "gamma" in doc["tables"]["tokens"] and "selected_gmts" in doc["tables"]["tokens"]


def test_tokens_round_trip_equals_the_analysis_records(dataset: Path, analysed) -> None:
    tokens = pq.read_table(step_file(dataset, "tokens", 7)).to_pandas()
    rows = [(g.index, a.index, t, a) for g, a in analysed.iter_answers() for t in a.tokens]
    assert len(tokens) == len(rows)
    assert tokens["group"].tolist() == [g for g, _, _, _ in rows]
    assert tokens["position"].tolist() == [t.position for _, _, t, _ in rows]
    assert tokens["token_id"].tolist() == [t.id for _, _, t, _ in rows]
    assert tokens["text"].astype(str).tolist() == [t.text for _, _, t, _ in rows]
    for col, attr in (("entropy", "entropy"), ("grad_norm", "grad_norm"), ("gamma", "grad_proxy")):
        want = np.array([getattr(t, attr) for _, _, t, _ in rows], dtype=np.float32)
        np.testing.assert_array_equal(tokens[col].to_numpy(), want)  # float32 is exact here
    for m in METHODS:
        assert tokens[f"selected_{m}"].tolist() == [t.selected[m] for _, _, t, _ in rows]
    np.testing.assert_array_equal(
        tokens["advantage"].to_numpy(), np.array([a.advantage for *_, a in rows], np.float32)
    )


def test_answer_and_step_rows_equal_the_analysis_summaries(dataset: Path, analysed) -> None:
    answers = pq.read_table(step_file(dataset, "answers", 7)).to_pandas()
    records = analysed.iter_answers()
    assert answers["length"].tolist() == [a.length for _, a in records]
    assert answers["text"].tolist() == [a.text for _, a in records]
    for m in METHODS:
        assert answers[f"selected_count_{m}"].tolist() == [
            a.selected_count()[m] for _, a in records
        ]
    disagreement = [  # the compared pair, entropy and gmts: one selects, the other not
        sum(1 for t in a.tokens if t.selected["entropy"] != t.selected["gmts"])
        for _, a in records
    ]
    assert answers["disagreement"].tolist() == disagreement
    zero = {g.index: len({a.reward for a in g.answers}) == 1 for g in analysed.groups}
    assert answers["zero_signal"].tolist() == [zero[g.index] for g, _ in records]
    step = pq.read_table(step_file(dataset, "steps", 7)).to_pylist()[0]
    s = analysed.summary
    for m in METHODS:
        assert step[f"coverage_{m}"] == pytest.approx(s["gradient_coverage"][m], rel=1e-6)
        assert step[f"wasted_{m}"] == pytest.approx(s["wasted_share"][m], rel=1e-6)
    assert step["overlap"] == pytest.approx(s["overlap"]["entropy|gmts"]["jaccard"], rel=1e-6)
    assert step["zero_signal_share"] == pytest.approx(sum(zero.values()) / len(zero))


def test_a_newer_version_or_another_format_is_refused(dataset: Path) -> None:
    doc = json.loads((dataset / "dataset.json").read_text())
    (dataset / "dataset.json").write_text(json.dumps({**doc, "version": VERSION + 1}))
    with pytest.raises(InvalidInputError, match="version"):
        AnalysedRun(dataset)
    (dataset / "dataset.json").write_text(json.dumps({**doc, "format": "other"}))
    with pytest.raises(InvalidInputError, match="not a gmts-analysed-run"):
        AnalysedRun(dataset)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three steps; step 2 has more tokens than two row groups hold."""
    root = tmp_path_factory.mktemp("synthetic")
    write_manifest(root, ("entropy", "gmts"), {})
    rng = np.random.default_rng(3)
    for step, groups in ((1, 40), (2, 200), (3, 40)):
        write_step(root, synthetic_step(step, groups, 16, rng, median_length=60))
    assert pq.ParquetFile(step_file(root, "tokens", 2)).num_row_groups >= 2
    return root


def _table(root: Path, table: str) -> pd.DataFrame:
    return pd.concat(
        [pq.read_table(p).to_pandas() for p in sorted((root / table).glob("*.parquet"))],
        ignore_index=True,
    )


def test_a_step_view_reads_only_its_file_and_the_row_groups_of_its_answer(
    synthetic: Path, tmp_path: Path
) -> None:
    run = AnalysedRun(synthetic, profile=True)
    tokens = pq.read_table(step_file(synthetic, "tokens", 2)).to_pandas()
    last = tokens.iloc[-1]
    page = run.answer_tokens(2, int(last["group"]), int(last["answer"]))
    want = tokens[(tokens["group"] == last["group"]) & (tokens["answer"] == last["answer"])]
    assert [r["position"] for r in page] == want["position"].tolist()
    scan = run.last_scan
    assert scan is not None and scan.files == (f"{synthetic.name}/tokens/step_00002.parquet",)
    total = pq.ParquetFile(step_file(synthetic, "tokens", 2)).num_row_groups
    assert scan.row_groups_total == total and scan.row_groups_scanned < total

    groups = run.step_groups(3, offset=5, limit=10)
    assert [g["group"] for g in groups] == list(range(5, 15))
    assert run.last_scan.files == (f"{synthetic.name}/answers/step_00003.parquet",)
    answers = run.group_answers(1, 4)
    assert [a["answer"] for a in answers] == list(range(16))


def test_run_wide_rankings_equal_the_naive_sort_and_read_one_table(
    synthetic: Path, tmp_path: Path
) -> None:
    run = AnalysedRun(synthetic, profile=True)
    answers = _table(synthetic, "answers")
    for by, expr in ANSWER_ORDERS.items():
        key = answers["advantage"].abs() if by == "abs_advantage" else answers[by]
        naive = answers.assign(k=key).sort_values(
            ["k", "step", "group", "answer"], ascending=[False, True, True, True], kind="stable"
        )
        got = run.rank_answers(by, limit=20)
        assert [(r["step"], r["group"], r["answer"]) for r in got] == list(
            naive[["step", "group", "answer"]].head(20).itertuples(index=False, name=None)
        ), expr
        assert all("/answers/" in f for f in run.last_scan.files)
    tokens = _table(synthetic, "tokens")
    gap = (tokens["entropy_rank"].astype(int) - tokens["gamma_rank"].astype(int)).abs()
    for by in TOP_ORDERS:
        key = gap if by == "rank_gap" else tokens[by].astype(float)
        naive = tokens.assign(k=key).sort_values(
            ["k", "step", "group", "answer", "position"],
            ascending=[False, True, True, True, True],
            kind="stable",
        )
        got = run.rank_tokens(by, limit=30, offset=20)
        assert [(r["step"], r["group"], r["answer"], r["position"]) for r in got] == list(
            naive[["step", "group", "answer", "position"]]
            .iloc[20:50]
            .itertuples(index=False, name=None)
        ), by
        assert all("/top/" in f for f in run.last_scan.files)  # never every token
    with pytest.raises(InvalidInputError, match=str(TOP_K)):
        run.rank_tokens("gamma", limit=50, offset=TOP_K)


def test_filters_text_search_and_zero_signal(synthetic: Path) -> None:
    run = AnalysedRun(synthetic)
    answers = _table(synthetic, "answers")
    right = answers[answers["text"].str.contains("right")]
    assert run.count_answers(contains="RIGHT") == len(right) > 1000
    got = run.rank_answers("length", contains="RIGHT", limit=1000)
    assert len(got) == 1000 and all("right" in r["text"] for r in got)
    assert run.count_answers(zero_signal=True, steps=(1, 1)) == int(
        (answers["zero_signal"] & (answers["step"] == 1)).sum()
    )
    assert run.rank_answers("length", contains="%", limit=5) == []  # literal, not a wildcard
    zero = answers[answers["zero_signal"]].groupby(["step", "group"]).size()
    rows = run.zero_signal_groups(limit=1000)
    assert [(r["step"], r["group"]) for r in rows] == list(zero.index)
    assert run.rank_answers("reward", zero_signal=False, steps=(2, 2), limit=1000)
    assert run.count_answers(steps=(2, 3)) == int((answers["step"] >= 2).sum())
    low = run.rank_answers("reward", descending=False, steps=(3, 3), limit=5)
    assert {r["step"] for r in low} == {3} and all(r["reward"] == 0 for r in low)
    with pytest.raises(InvalidInputError, match="choose one of"):
        run.rank_answers("text; DROP TABLE x")
    with pytest.raises(InvalidInputError, match="no analysed step 9"):
        run.step_groups(9)


def test_a_growing_run_shows_new_steps_and_reads_only_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_manifest(tmp_path, ("entropy", "gmts"), {})
    rng = np.random.default_rng(0)
    write_step(tmp_path, synthetic_step(1, 8, 4, rng))
    run = AnalysedRun(tmp_path)
    assert run.step_numbers() == [1]
    read: list[str] = []
    real = AnalysedRun.summary
    monkeypatch.setattr(
        AnalysedRun, "summary", lambda self, entry: read.append(entry.name) or real(self, entry)
    )
    write_step(tmp_path, synthetic_step(2, 8, 4, rng))
    (tmp_path / "steps" / "step_00003.parquet.tmp").write_bytes(b"half")  # being written
    assert run.step_numbers() == [1, 2]
    assert read == []  # the new step's summary came from the steps index, one file
    assert run.rank_answers("reward", limit=100)[-1]["step"] in (1, 2)
    summary = step_file(tmp_path, "steps", 2)
    os.utime(summary, ns=(1, 1))  # the file changed since its index line: the line is stale
    (tmp_path / "steps.jsonl").open("a").write('{"file": "step_00001.parquet", "key": [1')
    assert AnalysedRun(tmp_path).step_numbers() == [1, 2]  # a half-written line is skipped
    assert read == ["step_00002.parquet"]
    (tmp_path / "steps.jsonl").unlink()  # a dataset written before the index
    read.clear()
    fresh = AnalysedRun(tmp_path).steps()
    assert read == ["step_00001.parquet", "step_00002.parquet"]
    assert fresh == run.steps()


def test_synthetic_lengths_have_a_long_tail_and_rows_fill_row_groups() -> None:
    cols = synthetic_step(1, 256, 16, np.random.default_rng(1), median_length=70)
    lengths = cols.length
    assert np.median(lengths) == pytest.approx(70, rel=0.15)
    assert lengths.max() > 8 * np.median(lengths)
    assert ROW_GROUP_ROWS > 0 and len(cols.gamma) == int(lengths.sum())


def test_links_fifos_and_damaged_files_in_a_dataset_are_refused_not_followed(
    tmp_path: Path,
) -> None:
    import os

    root = tmp_path / "run"
    write_manifest(root, ("entropy", "gmts"), {})
    rng = np.random.default_rng(2)
    for step in (1, 2, 3):
        write_step(root, synthetic_step(step, 4, 4, rng))
    outside = tmp_path / "secret.parquet"
    step_file(root, "answers", 2).replace(outside)
    step_file(root, "answers", 2).symlink_to(outside)  # a link out of the dataset
    step_file(root, "tokens", 3).unlink()
    os.mkfifo(step_file(root, "tokens", 3))  # opening it would block
    step_file(root, "answers", 1).write_bytes(b"PAR1 not really")
    run = AnalysedRun(root)
    with pytest.raises(InvalidInputError, match="no analysed step 2"):
        run.step_groups(2)
    with pytest.raises(InvalidInputError, match="no analysed step 3"):
        run.answer_tokens(3, 0, 0)
    with pytest.raises(InvalidInputError, match="not a readable Parquet file"):
        run.step_groups(1)
    ranked = run.rank_answers("reward", limit=100, steps=(2, 3))
    assert ranked and all(r["step"] == 3 for r in ranked)  # the link is skipped
    (root / "steps" / "step_00004.parquet").write_bytes(b"junk")  # a damaged summary
    assert run.step_numbers() == [1, 2, 3]


def test_an_offset_past_every_answer_is_an_empty_page_without_a_scan(synthetic: Path) -> None:
    run = AnalysedRun(synthetic, profile=True)
    total = run.count_answers()
    run.last_scan = None
    assert run.ranked_answers("reward", offset=10_000_000) == ([], total)
    assert run.last_scan is None  # answered from the steps' summaries: no query ran
