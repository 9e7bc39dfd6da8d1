"""Selection: top ceil(ratio * N) per scope, ranks, ties, and GMTS's coverage optimality."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_core.analysis.summaries import gradient_coverage
from gmts_core.errors import UnknownNameError
from gmts_core.methods.selection import (
    METHODS,
    SelectionInputs,
    list_methods,
    register_method,
    scope_ids_for,
    select,
    top_k_count,
)
from gmts_core.stats.metrics import grad_proxy

RATIO_METHODS = ["entropy", "gmts", "gmts_entropy", "surprisal", "random"]
RATIO_METHODS += ["clip_cov", "kl_cov", "lopti", "gtpo", "rsi", "high_prob"]  # the literature


def make_inputs(
    lengths: list[list[int]], seed: int = 0, zero_groups: tuple[int, ...] = ()
) -> SelectionInputs:
    """Random per-token quantities for groups of answers; ``lengths[g]`` = answer lengths."""
    gen = torch.Generator().manual_seed(seed)
    ans_idx, grp_idx, scale, sign = [], [], [], []
    a = 0
    for g, answers in enumerate(lengths):
        for n in answers:
            s = 0.0 if g in zero_groups else float(torch.rand(1, generator=gen)) + 0.01
            ans_idx += [a] * n
            grp_idx += [g] * n
            scale += [s] * n
            sign += [(-1.0) ** a] * n  # alternate signs: successful and failed answers
            a += 1
    n = len(ans_idx)
    grad_norm = torch.rand(n, generator=gen, dtype=torch.float64) * 1.4
    signal = torch.tensor(scale, dtype=torch.float64)
    return SelectionInputs(
        entropy=torch.rand(n, generator=gen, dtype=torch.float64) * 3,
        logprob=-torch.rand(n, generator=gen, dtype=torch.float64) * 5,
        grad_norm=grad_norm,
        grad_proxy=grad_proxy(signal, torch.ones_like(signal), grad_norm),
        signal_scale=signal,
        answer_index=torch.tensor(ans_idx),
        group_index=torch.tensor(grp_idx),
        seed=seed,
        advantage=signal * torch.tensor(sign, dtype=torch.float64),
    )


LENGTHS = [[5, 9, 1, 12], [7, 3], [4, 4, 4]]


def test_registry_has_the_six_methods() -> None:
    assert set(list_methods()) >= {"entropy", "gmts", "gmts_entropy", "surprisal", "random", "all"}


@pytest.mark.parametrize("ratio", [0.2, 0.5, 0.01, 1.0, 0.7])
def test_top_k_count(ratio: float) -> None:
    for n in (1, 3, 10, 49, 100):
        assert top_k_count(ratio, n) == min(n, math.ceil(round(ratio * n, 9)))
    assert top_k_count(0.7, 10) == 7  # 0.7 * 10 = 7.000000000000001 in floating point
    assert top_k_count(0.2, 0) == 0


@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.5])
def test_ratio_out_of_range(ratio: float) -> None:
    with pytest.raises(ValueError, match="ratio"):
        top_k_count(ratio, 10)


@pytest.mark.parametrize("scope", ["batch", "group", "answer"])
@pytest.mark.parametrize("method", RATIO_METHODS)
@pytest.mark.parametrize("ratio", [0.2, 0.35, 1.0])
def test_exactly_ceil_ratio_n_per_scope_and_ranks_are_a_permutation(
    scope: str, method: str, ratio: float
) -> None:
    x = make_inputs(LENGTHS, seed=3)
    sel = select(x, method, ratio, scope)
    scopes = scope_ids_for(x, scope)
    assert sel.scores.shape == sel.ranks.shape == sel.selected.shape == (x.num_tokens,)
    for s in torch.unique(scopes):
        in_scope = scopes == s
        n = int(in_scope.sum())
        assert int(sel.selected[in_scope].sum()) == math.ceil(round(ratio * n, 9))
        ranks = sel.ranks[in_scope]
        assert sorted(ranks.tolist()) == list(range(1, n + 1))
        # the selected tokens are exactly ranks 1..k, and they have the highest scores
        k = int(sel.selected[in_scope].sum())
        assert torch.equal(sel.selected[in_scope], ranks <= k)
        scores = sel.scores[in_scope]
        order = torch.argsort(ranks)
        assert bool((scores[order][:-1] >= scores[order][1:]).all())


@pytest.mark.parametrize("scope", ["batch", "group", "answer"])
def test_all_selects_everything(scope: str) -> None:
    x = make_inputs(LENGTHS)
    sel = select(x, "all", 0.2, scope)
    assert bool(sel.selected.all())
    assert gradient_coverage(x.grad_proxy, sel.selected) == pytest.approx(1.0)


@pytest.mark.parametrize("scope", ["batch", "group", "answer"])
def test_ties_are_broken_by_answer_then_position(scope: str) -> None:
    x = make_inputs(LENGTHS)
    x.entropy = torch.ones_like(x.entropy)  # every score equal
    sel = select(x, "entropy", 0.3, scope)
    scopes = scope_ids_for(x, scope)
    for s in torch.unique(scopes):
        in_scope = scopes == s
        n = int(in_scope.sum())
        # flat order is (group, answer, position), so ranks follow it
        assert sel.ranks[in_scope].tolist() == list(range(1, n + 1))
    again = select(x, "entropy", 0.3, scope)
    assert torch.equal(sel.ranks, again.ranks) and torch.equal(sel.selected, again.selected)


def test_partial_ties_keep_flat_order_among_equals() -> None:
    x = make_inputs([[6]])
    x.entropy = torch.tensor([1.0, 3.0, 1.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    sel = select(x, "entropy", 0.5, "batch")
    assert sel.ranks.tolist() == [4, 1, 5, 2, 3, 6]
    assert sel.selected.tolist() == [False, True, False, True, True, False]


def test_nan_scores_rank_last() -> None:
    x = make_inputs([[4]])
    x.entropy = torch.tensor([float("nan"), 0.5, 2.0, 1.0], dtype=torch.float64)
    sel = select(x, "entropy", 0.5, "batch")
    assert sel.ranks.tolist() == [4, 3, 1, 2]


def test_scores_are_the_documented_quantities() -> None:
    x = make_inputs(LENGTHS)
    assert torch.equal(select(x, "entropy", 0.2).scores, x.entropy)
    assert torch.equal(select(x, "gmts", 0.2).scores, x.grad_proxy)
    assert torch.allclose(select(x, "gmts_entropy", 0.2).scores, x.signal_scale * x.entropy)
    assert torch.equal(select(x, "surprisal", 0.2).scores, -x.logprob)


def test_random_is_seeded() -> None:
    x = make_inputs(LENGTHS, seed=1)
    a, b = select(x, "random", 0.3), select(x, "random", 0.3)
    assert torch.equal(a.selected, b.selected)
    x.seed = 2
    assert not torch.equal(a.scores, select(x, "random", 0.3).scores)


def test_unknown_method_and_scope() -> None:
    x = make_inputs(LENGTHS)
    with pytest.raises(UnknownNameError, match="entropy.*gmts"):
        select(x, "magic", 0.2)
    with pytest.raises(ValueError, match="scope"):
        select(x, "entropy", 0.2, "everything")


def test_adding_a_method_is_one_small_function() -> None:
    @register_method("longest_prefix_test", "test-only: earlier positions first")
    def earliest(x: SelectionInputs) -> torch.Tensor:
        return -torch.arange(x.num_tokens, dtype=torch.float64)

    try:
        x = make_inputs([[10]])
        assert "longest_prefix_test" in list_methods()
        assert select(x, "longest_prefix_test", 0.3).selected.tolist() == [True] * 3 + [False] * 7
    finally:
        METHODS._items.pop("longest_prefix_test")  # keep the registry as other tests expect it


lengths_strategy = st.lists(
    st.lists(st.integers(1, 12), min_size=1, max_size=5), min_size=1, max_size=4
)


@given(
    lengths=lengths_strategy,
    seed=st.integers(0, 10_000),
    ratio=st.floats(0.01, 1.0),
    scope=st.sampled_from(["batch", "group", "answer"]),
    zero_first=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_gmts_coverage_dominates_every_method(
    lengths: list[list[int]], seed: int, ratio: float, scope: str, zero_first: bool
) -> None:
    """With the same k per scope, top-k by gamma keeps the most gamma mass: none beats it."""
    x = make_inputs(lengths, seed=seed, zero_groups=(0,) if zero_first else ())
    cov = {
        m: gradient_coverage(x.grad_proxy, select(x, m, ratio, scope).selected)
        for m in METHODS.names()
    }
    assert cov["all"] == pytest.approx(1.0)
    for m in RATIO_METHODS:
        assert cov["gmts"] >= cov[m] - 1e-12, (m, cov)
