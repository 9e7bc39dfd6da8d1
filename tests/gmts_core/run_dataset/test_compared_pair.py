"""Disagreement of a pair the user chooses: the stored pair's column, or another pair's count
from every token's selections, equal to counting them by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset import AnalysedRun, write_step
from gmts_core.run_dataset.schema import write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step


def test_another_pairs_disagreement_is_counted_from_the_token_selections(tmp_path: Path) -> None:
    methods = ("entropy", "gmts", "random")
    write_manifest(tmp_path, methods, {})
    rng = np.random.default_rng(7)
    for step in (1, 2):
        cols = synthetic_step(step, 6, 4, rng, median_length=20)
        pick = rng.random(len(cols.gamma)) < 0.3
        write_step(
            tmp_path,
            dataclasses.replace(cols, methods=methods, selected={**cols.selected, "random": pick}),
        )
    tokens = pd.concat(
        pq.read_table(p).to_pandas() for p in sorted((tmp_path / "tokens").glob("*.parquet"))
    )
    tokens["d"] = tokens["selected_entropy"] != tokens["selected_random"]
    want = tokens.groupby(["step", "group", "answer"])["d"].sum()
    run = AnalysedRun(tmp_path)
    rows, total = run.ranked_answers("disagreement", limit=1000, pair=("random", "entropy"))
    assert total == len(want) == len(rows)
    got = {(r["step"], r["group"], r["answer"]): r["disagreement"] for r in rows}
    assert got == {k: int(v) for k, v in want.items()}
    assert [r["disagreement"] for r in rows] == sorted(got.values(), reverse=True)
    zero, _ = run.ranked_answers(
        "disagreement", limit=5, zero_signal=False, pair=("entropy", "random")
    )
    assert all(not r["zero_signal"] for r in zero)
    stored, _ = run.ranked_answers("disagreement", limit=1000, pair=("gmts", "entropy"))
    assert stored == run.ranked_answers("disagreement", limit=1000)[0]  # the stored column
    with pytest.raises(InvalidInputError, match="two of this run's methods"):
        run.ranked_answers("disagreement", pair=("entropy", "nope"))
