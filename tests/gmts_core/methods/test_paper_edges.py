"""The paper's methods at every edge of the released code's rules, against a float64
reimplementation written here from that code (outongyiLv/GMTS: Framework1
``GMTS-Framework1/grpo_tools/grpo.py`` ``GMTS()`` / ``normalize_rewards_per_group()``,
Framework2 ``GMTS-Framework2/verl/workers/actor/dp_actor.py`` ``update_policy()``).

The reimplementation takes the share removed as the released configs write it, a decimal
literal parsed from text (``selected_percent: 0.3``), and uses lists, ``math`` and numpy
(Framework1's own ``np.mean`` / ``np.std``); no gmts_core helper. Each difference the docs
list (docs/methods.md) has a test that states it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from gmts_core.methods.selection import METHODS, SelectionInputs, select

RATIO_PERCENTS = range(1, 100)  # ratio 0.01 .. 0.99
SIZES = range(1, 41)


def literal(percent: int) -> float:
    """A two-decimal share as a config file writes it: '0.07' -> the float 0.07."""
    return float(f"0.{percent:02d}")


def f1_kept(scores: list[float], selected_percent: float) -> set[int]:
    """GMTS(): entries sorted ascending by score (a stable sort), the first
    k = max(1, ceil(len(entries) * frac)) set to 0, the rest kept."""
    entries = sorted(((s, i) for i, s in enumerate(scores)), key=lambda e: e[0])
    k = max(1, math.ceil(len(entries) * selected_percent))
    return {i for _, i in entries[k:]}


def f2_kept(scores: list[float], percent: float) -> set[int]:
    """update_policy(): the non-zero scores sorted ascending, num_to_remove =
    int(len * percent), threshold = sorted[num_to_remove - 1] (0 when num_to_remove is 0),
    kept where score > threshold."""
    nonzero = sorted(s for s in scores if s != 0)
    num_to_remove = int(len(nonzero) * percent)
    threshold = 0.0 if num_to_remove == 0 else nonzero[num_to_remove - 1]
    return {i for i, s in enumerate(scores) if s > threshold}


def tied_scores(n: int, zeros: bool) -> list[float]:
    """Four values, so most cuts fall inside a run of ties; with ``zeros`` every fifth is 0."""
    return [0.0 if zeros and i % 5 == 0 else float((i * 7) % 4 + 1) for i in range(n)]


def one_scope(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.long)


@pytest.mark.parametrize("percent", RATIO_PERCENTS)
def test_keep_rules_equal_the_released_arithmetic_at_every_two_decimal_ratio(
    percent: int,
) -> None:
    """ratio = 0.01 .. 0.99, the code's share removed = its decimal complement as a literal;
    groups of 1..40 tokens with ties on the cut (and zeros for Framework2)."""
    ratio, removed = literal(percent), literal(100 - percent)
    f1, f2 = METHODS.get("gmts_paper").keep, METHODS.get("gmts_paper_verl").keep
    assert f1 is not None and f2 is not None
    for n in SIZES:
        scores = tied_scores(n, zeros=False)
        expected = f1_kept(scores, removed)
        _, got = f1(torch.tensor(scores, dtype=torch.float64), one_scope(n), ratio)
        kept = {i for i in range(n) if bool(got[i])}
        if expected:
            assert kept == expected, (ratio, n)
        else:  # the documented difference: Framework1 keeps none, we keep the top one
            assert kept == {max(range(n), key=lambda i: (scores[i], i))}, (ratio, n)
        scores = tied_scores(n, zeros=True)
        _, got = f2(torch.tensor(scores, dtype=torch.float64), one_scope(n), ratio)
        assert {i for i in range(n) if bool(got[i])} == f2_kept(scores, removed), (ratio, n)


def test_ratios_where_one_minus_ratio_would_remove_another_count() -> None:
    """The cases the float 1.0 - ratio gets wrong: ratio 0.7 with 10 tokens (Framework1 keeps
    7, not 6) and ratio 0.8 with 5 non-zero tokens (Framework2's percent 0.2 removes 1, where
    1.0 - 0.8 = 0.19999999999999996 removes none); both through select()."""
    assert math.ceil(10 * (1.0 - 0.7)) == 4 and math.ceil(10 * 0.3) == 3  # the trap itself
    assert int(5 * (1.0 - 0.8)) == 0 and int(5 * 0.2) == 1
    h = torch.tensor([0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4, 1.0], dtype=torch.float64)
    x = _inputs(h, answer_index=torch.zeros(10, dtype=torch.long))
    assert int(select(x, "gmts_paper", 0.7).selected.sum()) == 7
    x5 = _inputs(h[:5], answer_index=torch.zeros(5, dtype=torch.long))
    assert int(select(x5, "gmts_paper_verl", 0.8).selected.sum()) == 4
    changed_f1 = sum(
        1
        for p in RATIO_PERCENTS
        for n in SIZES
        if max(1, math.ceil(n * (1.0 - literal(p)))) != max(1, math.ceil(n * literal(100 - p)))
    )
    assert changed_f1 > 0  # the sweep above covers cases the naive rule gets wrong


def _inputs(
    entropy: torch.Tensor,
    answer_index: torch.Tensor,
    group_index: torch.Tensor | None = None,
    advantage: torch.Tensor | None = None,
    reward: torch.Tensor | None = None,
    answer_group: torch.Tensor | None = None,
    answer_reward: torch.Tensor | None = None,
) -> SelectionInputs:
    ones = torch.ones_like(entropy, dtype=torch.float64)
    return SelectionInputs(
        entropy=entropy.double(),
        logprob=-ones,
        grad_norm=ones,
        grad_proxy=entropy.double(),
        signal_scale=ones,
        answer_index=answer_index,
        group_index=torch.zeros_like(answer_index) if group_index is None else group_index,
        advantage=ones if advantage is None and reward is None else advantage,
        reward=reward,
        answer_group=answer_group,
        answer_reward=answer_reward,
    )


# --- zero-length answers ------------------------------------------------------------------


def test_zero_length_answers_count_in_g_and_in_the_reward_mean_and_std() -> None:
    """Two groups of four answers; answers 1 and 6 have no token. Framework1
    (normalize_rewards_per_group with np.mean / np.std over all of a group's answers, G the
    group's answer count) scores every token H |A_i| / (G |o_i|) and keeps per group."""
    lengths = [3, 0, 5, 2, 4, 4, 0, 1]
    rewards = [1.0, 0.0, 0.5, 0.0, 0.2, 1.0, 0.9, 0.0]
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    gen = torch.Generator().manual_seed(3)
    entropy, answer, rows = [], [], []
    for a, n in enumerate(lengths):
        h = (torch.rand(n, generator=gen, dtype=torch.float64) + 0.05).tolist()
        entropy += h
        answer += [a] * n
    expected_scores: list[float] = []
    for g in (0, 1):
        members = [a for a in range(8) if groups[a] == g]
        r = np.array([rewards[a] for a in members])
        adv = (r - np.mean(r)) / (np.std(r) + 1e-6)
        for a, A in zip(members, adv, strict=True):
            hs = [h for h, aa in zip(entropy, answer, strict=True) if aa == a]
            expected_scores += [h * abs(A) / (len(members) * lengths[a]) for h in hs]
            rows += [g] * len(hs)
    ans = torch.tensor(answer)
    tok_groups = torch.tensor([groups[a] for a in answer])
    x = _inputs(
        torch.tensor(entropy),
        ans,
        group_index=tok_groups,
        reward=torch.tensor([rewards[a] for a in answer], dtype=torch.float64),
        answer_group=torch.tensor(groups),
        answer_reward=torch.tensor(rewards, dtype=torch.float64),
    )
    sel = select(x, "gmts_paper", 0.3)
    assert_close(sel.scores, torch.tensor(expected_scores, dtype=torch.float64))
    for g in (0, 1):
        idx = [i for i, gg in enumerate(rows) if gg == g]
        kept = f1_kept([expected_scores[i] for i in idx], literal(70))
        assert {j for j, i in enumerate(idx) if bool(sel.selected[i])} == kept
    # without the answer tables the tokens alone hide the empty answers: G 3, other A_i
    hidden = _inputs(x.entropy, ans, tok_groups, reward=x.reward)
    assert not torch.allclose(select(hidden, "gmts_paper", 0.3).scores, sel.scores)


# --- the documented differences, each stated -------------------------------------------------


def test_a_group_framework1_would_empty_keeps_its_top_token() -> None:
    """Framework1 removes max(1, ceil(0.8 N)) >= N tokens of a group of fewer than 5 at ratio
    0.2, keeping none; gmts_paper keeps the highest one (the later of a tie)."""
    h = torch.tensor([0.3, 0.9, 0.2, 0.9], dtype=torch.float64)
    assert f1_kept(h.tolist(), literal(80)) == set()
    x = _inputs(h, torch.zeros(4, dtype=torch.long))
    assert select(x, "gmts_paper", 0.2).selected.tolist() == [False, False, False, True]


def test_a_kept_token_with_zero_entropy_stays_selected() -> None:
    """Framework1 trains a kept token only where its (zeroed) entropy is non-zero (cal_fit =
    entropy != 0), so a kept token with H = 0 is dropped there; here it stays selected (its
    logit gradient is 0 to float precision anyway)."""
    h = torch.tensor([0.0] * 7 + [1.0, 2.0, 3.0], dtype=torch.float64)
    x = _inputs(h, torch.zeros(10, dtype=torch.long))
    sel = select(x, "gmts_paper", 0.5)
    kept = f1_kept(h.tolist(), literal(50))
    framework1_trains = {i for i in kept if h[i] != 0}
    assert {i for i in range(10) if bool(sel.selected[i])} == kept == {5, 6, 7, 8, 9}
    assert framework1_trains == {7, 8, 9}


def test_equal_rewards_give_an_exact_zero_advantage() -> None:
    """Rewards 0.1, 0.1, 0.1: np.mean is 0.10000000000000002, so Framework1's
    (r - mean) / (std + 1e-6) is a rounding-noise advantage of about 1e-11; here exactly 0
    (beta 0: every score 0)."""
    r = np.array([0.1, 0.1, 0.1])
    noise = (r - np.mean(r)) / (np.std(r) + 1e-6)
    assert bool((noise != 0).any())
    ans = torch.tensor([0, 0, 1, 2, 2])
    x = _inputs(torch.tensor([0.4, 0.5, 0.6, 0.7, 0.8]), ans, reward=torch.full((5,), 0.1).double())
    for method in ("gmts_paper", "gmts_paper_verl"):
        assert bool((select(x, method, 0.5).scores == 0).all()), method


def verl_grpo_advantages(scores: list[float], index: list[str], eps: float = 1e-6) -> list[float]:
    """verl's ``compute_grpo_outcome_advantage`` (volcengine/verl trainer/ppo/core_algos.py,
    norm_adv_by_std_in_grpo=True) in float64: a uid with one score gets id2mean 0 and id2std 1,
    more get torch.mean / torch.std (unbiased); (score - mean) / (std + eps)."""
    by_uid: dict[str, list[float]] = {}
    for s, u in zip(scores, index, strict=True):
        by_uid.setdefault(u, []).append(s)
    stats = {}
    for u, group in by_uid.items():
        if len(group) == 1:
            stats[u] = (0.0, 1.0)
        else:
            stats[u] = (float(np.mean(group)), float(np.std(group, ddof=1)))
    return [(s - stats[u][0]) / (stats[u][1] + eps) for s, u in zip(scores, index, strict=True)]


def test_a_single_answer_group_is_standardised_as_each_code_does() -> None:
    """A group of one answer: verl sets mean 0 and std 1, so gmts_paper_verl scores its tokens
    with A = r / (1 + 1e-6) and trains them; Framework1 (population std 0) gives A = 0. The
    other group is standardised as usual by both."""
    ans = torch.tensor([0, 0, 1, 1, 2, 2])
    grp = torch.tensor([0, 0, 1, 1, 1, 1])
    h = torch.tensor([0.4, 0.5, 0.6, 0.7, 0.8, 0.9], dtype=torch.float64)
    reward = torch.tensor([0.75, 0.75, 1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    x = _inputs(h, ans, group_index=grp, reward=reward)
    a = verl_grpo_advantages([0.75, 1.0, 0.0], ["g0", "g1", "g1"])
    assert a[0] == 0.75 / (1 + 1e-6)
    want = h * torch.tensor([abs(a[i]) for i in ans.tolist()], dtype=torch.float64)
    assert_close(select(x, "gmts_paper_verl", 0.5).scores, want, rtol=1e-12, atol=0)
    framework1 = select(x, "gmts_paper", 0.5).scores
    assert framework1[:2].tolist() == [0.0, 0.0] and bool((framework1[2:] > 0).all())


# --- the default scope -----------------------------------------------------------------------


def test_select_without_a_scope_uses_the_methods_own() -> None:
    """gmts_paper / gmts_paper_verl without a scope select per group, as the paper; the other
    methods over the batch; an explicit scope wins."""
    gen = torch.Generator().manual_seed(1)
    n = 24
    ans = torch.arange(n) // 4
    grp = ans // 2
    h = torch.rand(n, generator=gen, dtype=torch.float64) * (1 + 4 * (grp == 0))
    reward = (torch.arange(n) // 4 % 2).double() * (1.0 + grp.double())
    x = _inputs(h, ans, group_index=grp, reward=reward)
    for method in ("gmts_paper", "gmts_paper_verl"):
        alone = select(x, method, 0.2).selected
        assert torch.equal(alone, select(x, method, 0.2, "group").selected), method
        assert not torch.equal(alone, select(x, method, 0.2, "batch").selected), method
    assert torch.equal(
        select(x, "entropy", 0.2).selected, select(x, "entropy", 0.2, "batch").selected
    )
