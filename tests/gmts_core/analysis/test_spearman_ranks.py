"""The vectorised Spearman correlation equals scipy's, ties and all."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import rankdata, spearmanr

from gmts_core.analysis.summaries import average_ranks, spearman


@given(st.lists(st.integers(0, 4), min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_average_ranks_equal_scipy_rankdata(values: list[int]) -> None:
    v = torch.tensor(values, dtype=torch.float64)
    assert average_ranks(v).tolist() == pytest.approx(rankdata(values, "average").tolist())


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=40))
@settings(max_examples=80, deadline=None)
def test_spearman_with_many_ties_equals_scipy(pairs: list[tuple[int, int]]) -> None:
    x = torch.tensor([p[0] for p in pairs], dtype=torch.float32)
    y = torch.tensor([p[1] for p in pairs], dtype=torch.float32)
    got = spearman(x, y)
    if len(set(x.tolist())) == 1 or len(set(y.tolist())) == 1:
        assert got is None
    else:
        assert got == pytest.approx(spearmanr(x.numpy(), y.numpy()).statistic, abs=1e-12)


def test_spearman_of_a_nan_is_none_and_a_perfect_order_is_one() -> None:
    assert spearman(torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([1.0, 2.0, 3.0])) is None
    assert spearman(torch.arange(5.0), torch.arange(5.0) ** 3) == 1.0
    assert spearman(torch.arange(5.0), -torch.arange(5.0)) == -1.0
