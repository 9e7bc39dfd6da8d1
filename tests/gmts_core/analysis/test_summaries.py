"""Summaries: coverage, overlap, Spearman, wasted share, and GMTS on a zero-signal batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from gmts_core.analysis.summaries import (
    budget_share,
    gradient_coverage,
    overlap,
    pairwise_overlap,
    spearman,
    spearman_by_answer,
    spearman_within,
    wasted_share,
)
from gmts_core.methods.selection import SelectionInputs, select

B = torch.tensor


def test_gradient_coverage_by_hand() -> None:
    proxy = B([4.0, 1.0, 0.0, 3.0, 2.0], dtype=torch.float64)
    assert gradient_coverage(proxy, B([True, False, False, True, False])) == pytest.approx(0.7)
    assert gradient_coverage(proxy, torch.ones(5, dtype=torch.bool)) == 1.0
    assert gradient_coverage(proxy, torch.zeros(5, dtype=torch.bool)) == 0.0
    zero = torch.zeros(3, dtype=torch.float64)  # no signal at all: only "everything" covers it
    assert gradient_coverage(zero, torch.ones(3, dtype=torch.bool)) == 1.0
    assert gradient_coverage(zero, B([True, False, False])) == 0.0


def test_overlap_and_jaccard() -> None:
    a = B([True, True, False, False, True])
    b = B([False, True, True, False, True])
    assert overlap(a, b) == {"count": 2, "jaccard": pytest.approx(2 / 4)}
    assert overlap(a, a) == {"count": 3, "jaccard": 1.0}
    none = torch.zeros(5, dtype=torch.bool)
    assert overlap(none, none) == {"count": 0, "jaccard": 1.0}
    assert overlap(a, ~a) == {"count": 0, "jaccard": 0.0}


def _inputs(
    entropy: list[float], proxy: list[float], answers: list[int], groups: list[int]
) -> SelectionInputs:
    e, g = B(entropy, dtype=torch.float64), B(proxy, dtype=torch.float64)
    ans = B(answers)
    scale = torch.zeros(len(answers), dtype=torch.float64)
    for a in ans.unique():  # |A| w per answer, so that grad_norm * scale = proxy
        m = ans == a
        scale[m] = 1.0 if bool((g[m] > 0).any()) else 0.0
    return SelectionInputs(
        entropy=e,
        logprob=-e,
        grad_norm=g,
        grad_proxy=g,
        signal_scale=scale,
        answer_index=ans,
        group_index=B(groups),
    )


def test_pairwise_overlap_keys_follow_method_order() -> None:
    x = _inputs([3, 2, 1, 0], [0, 1, 2, 3], [0, 0, 1, 1], [0, 0, 0, 0])
    sels = {m: select(x, m, 0.5) for m in ("entropy", "gmts", "all")}
    ov = pairwise_overlap(sels)
    assert list(ov) == ["entropy|gmts", "entropy|all", "gmts|all"]
    assert ov["entropy|gmts"] == {"count": 0, "jaccard": 0.0}  # opposite orders
    assert ov["entropy|all"] == {"count": 2, "jaccard": 0.5}


@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5)), min_size=2, max_size=30))
@settings(max_examples=60, deadline=None)
def test_spearman_matches_scipy(pairs: list[tuple[float, float]]) -> None:
    x = B([p[0] for p in pairs], dtype=torch.float64)
    y = B([p[1] for p in pairs], dtype=torch.float64)
    got = spearman(x, y)
    if bool((x == x[0]).all()) or bool((y == y[0]).all()):
        assert got is None  # undefined for a constant input: None, never NaN
    else:
        assert got == pytest.approx(spearmanr(x.numpy(), y.numpy()).statistic)


def test_spearman_within_answers_and_over_the_batch() -> None:
    # within each answer entropy and proxy agree perfectly; across answers the advantage
    # scale flips the order (the paper's observation in miniature)
    entropy = [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    proxy = [0.1, 0.2, 0.3, 0.01, 0.02, 0.03]
    rho = spearman_by_answer(B(entropy), B(proxy), B([0, 0, 0, 1, 1, 1]))
    assert rho["within_answer_median"] == pytest.approx(1.0)
    assert rho["batch"] == pytest.approx(spearmanr(entropy, proxy).statistic)
    assert rho["batch"] < 1.0
    median = spearman_by_answer(
        B([1.0, 2, 3, 1, 2, 3, 3, 2, 1]),
        B([1.0, 2, 3, 3, 2, 1, 1, 2, 3]),
        B([0, 0, 0, 1, 1, 1, 2, 2, 2]),
    )
    assert median["within_answer_median"] == pytest.approx(-1.0)  # median of (1, -1, -1)
    single = spearman_by_answer(B([1.0]), B([2.0]), B([0]))
    assert single == {"batch": None, "within_answer_median": None}


@given(
    st.lists(
        st.tuples(
            st.integers(0, 4), st.sampled_from([0.0, 1.0, 2.0, 0.5, math.nan]), st.integers(0, 3)
        ),
        min_size=1,
        max_size=40,
    )
)
@settings(max_examples=80, deadline=None)
def test_spearman_within_each_answer_equals_scipy_per_answer(
    rows: list[tuple[int, float, int]],
) -> None:
    """The all-answers-at-once form equals scipy on each answer alone (ties, NaNs, constants)."""
    answer = B([r[0] for r in rows])
    x = B([r[1] for r in rows], dtype=torch.float64)
    y = B([float(r[2]) for r in rows], dtype=torch.float64)
    got = spearman_within(x, y, answer)
    assert list(got) == sorted(set(answer.tolist()))
    for a, rho in got.items():
        xa, ya = x[answer == a].numpy(), y[answer == a].numpy()
        undefined = xa.size < 2 or np.isnan(xa).any() or (xa == xa[0]).all() or (ya == ya[0]).all()
        if undefined:
            assert rho is None
        else:
            assert rho == pytest.approx(spearmanr(xa, ya).statistic, abs=1e-12)


# A batch of two groups: group 0 has signal, group 1 has equal rewards (every A_i = 0).
ENTROPY = [0.1, 0.5, 0.2, 0.3, 2.0, 2.5, 1.9, 3.0]
PROXY = [0.04, 0.30, 0.00, 0.10, 0.0, 0.0, 0.0, 0.0]
ANSWERS = [0, 0, 1, 1, 2, 2, 3, 3]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]


def test_wasted_share_by_hand() -> None:
    x = _inputs(ENTROPY, PROXY, ANSWERS, GROUPS)
    by_entropy = select(x, "entropy", 0.5)  # top 4 entropies: all four in the zero group
    assert by_entropy.selected.tolist() == [False] * 4 + [True] * 4
    assert wasted_share(x.grad_proxy, by_entropy.selected) == 1.0
    by_gmts = select(x, "gmts", 0.5)  # 3 non-zero proxies, then the first zero in flat order
    assert by_gmts.selected.tolist() == [True, True, True, True] + [False] * 4
    assert wasted_share(x.grad_proxy, by_gmts.selected) == pytest.approx(1 / 4)  # token 2: p = 0
    assert wasted_share(x.grad_proxy, select(x, "gmts", 0.25).selected) == 0.0
    assert wasted_share(x.grad_proxy, torch.zeros(8, dtype=torch.bool)) == 0.0
    assert budget_share(by_entropy.selected, x.group_index, 2) == [0.0, 1.0]
    assert budget_share(by_gmts.selected, x.group_index, 2) == [1.0, 0.0]


@given(
    n_signal=st.lists(st.integers(1, 8), min_size=1, max_size=4),
    n_zero=st.lists(st.integers(1, 8), min_size=1, max_size=4),
    ratio=st.floats(0.01, 1.0),
    seed=st.integers(0, 1000),
)
@settings(max_examples=100, deadline=None)
def test_gmts_never_spends_budget_on_a_zero_signal_group(
    n_signal: list[int], n_zero: list[int], ratio: float, seed: int
) -> None:
    """Issue 10: gmts picks a zero-signal token only once every non-zero-proxy token is picked."""
    gen = torch.Generator().manual_seed(seed)
    answers = [a for a, n in enumerate(n_signal + n_zero) for _ in range(n)]
    groups = [0] * sum(n_signal) + [1] * sum(n_zero)
    proxy = torch.rand(sum(n_signal), generator=gen, dtype=torch.float64) + 1e-3
    proxy = proxy.tolist() + [0.0] * sum(n_zero)
    entropy = torch.rand(len(answers), generator=gen, dtype=torch.float64).tolist()
    x = _inputs(entropy, proxy, answers, groups)
    sel = select(x, "gmts", ratio, "batch").selected
    zero_group = x.group_index == 1
    if bool(sel[zero_group].any()):
        assert bool(sel[x.grad_proxy > 0].all())
    else:
        assert wasted_share(x.grad_proxy, sel) == 0.0
    if int(sel.sum()) <= int((x.grad_proxy > 0).sum()):
        assert not bool(sel[zero_group].any()) and wasted_share(x.grad_proxy, sel) == 0.0
