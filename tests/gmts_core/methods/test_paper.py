"""The paper's methods against its released code's rules, recomputed here in plain Python.

``gmts_paper`` is Framework1 (outongyiLv/GMTS GMTS-Framework1/grpo_tools/grpo.py, ``GMTS()``)
and ``gmts_paper_verl`` is Framework2's rule (GMTS-Framework2/verl/workers/actor/dp_actor.py,
``update_policy``). Every expected value below is built from the stated rules with lists,
``math`` and ``statistics`` (no gmts_core helper), on hand-built batches with beta > 0,
unequal answer lengths, exact ties at the boundary, zero-signal groups and mixed signs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pytest
import torch
from torch.testing import assert_close

from gmts_core.analysis.analyze import GroupInput, analyze
from gmts_core.config import AnalysisConfig
from gmts_core.methods.catalog import method_info
from gmts_core.methods.selection import SelectionInputs, default_scope, select
from gmts_core.model.loading import LoadedModel

EPS_LOW, EPS_HIGH = 0.2, 0.28


@dataclass
class Answer:
    reward: float
    entropy: list[float]
    logp: list[float]  # log pi_theta
    old: list[float]  # log pi_old
    ref: list[float]  # log pi_ref


def _std_advantages(rewards: list[float], unbiased: bool) -> list[float]:
    if len(set(rewards)) == 1:
        return [0.0] * len(rewards)
    m = statistics.fmean(rewards)
    s = statistics.stdev(rewards) if unbiased else statistics.pstdev(rewards)
    return [(r - m) / (s + 1e-6) for r in rewards]


def _rows(groups: list[list[Answer]], beta: float, unbiased: bool, length_norm: bool) -> list:
    """(group, answer, position, score) per token from the stated formula."""
    out, a_id = [], 0
    for g, answers in enumerate(groups):
        adv = _std_advantages([a.reward for a in answers], unbiased)
        for ans, A in zip(answers, adv, strict=True):
            for t, h in enumerate(ans.entropy):
                r = math.exp(ans.logp[t] - ans.old[t])
                flat = (r > 1 + EPS_HIGH and A > 0) or (r < 1 - EPS_LOW and A < 0)
                kl = beta * (math.exp(ans.ref[t] - ans.logp[t]) - 1.0)
                score = h * abs(r * (0.0 if flat else 1.0) * A + kl)
                if length_norm:
                    score /= len(answers) * len(ans.entropy)
                out.append((g, a_id, t, score))
            a_id += 1
    return out


def framework1_expected(rows: list, ratio: float) -> set[tuple[int, int]]:
    """GMTS(): per group, entries sorted ascending (stable), the first
    max(1, ceil(N * selected_percent)) removed, selected_percent = 1 - ratio as a config
    writes it (two decimals: the float 0.3 for ratio 0.7, not 1.0 - 0.7)."""
    kept = set()
    for g in {r[0] for r in rows}:
        entries = [(s, a, t) for gg, a, t, s in rows if gg == g]
        entries.sort(key=lambda e: e[0])
        k = max(1, math.ceil(len(entries) * round(1 - ratio, 2)))
        kept |= {(a, t) for _, a, t in entries[k:]}
    return kept


def framework2_expected(rows: list, ratio: float) -> set[tuple[int, int]]:
    """update_policy: threshold = sorted non-zero scores[int(n p) - 1] (0 if int(n p) = 0);
    kept where score > threshold."""
    kept = set()
    for g in {r[0] for r in rows}:
        scores = [s for gg, _, _, s in rows if gg == g]
        nonzero = sorted(s for s in scores if s != 0)
        k = int(len(nonzero) * round(1 - ratio, 2))
        threshold = 0.0 if k == 0 else nonzero[k - 1]
        kept |= {(a, t) for gg, a, t, s in rows if gg == g and s > threshold}
    return kept


def inputs(
    groups: list[list[Answer]], beta: float, caller_advantage: float = 7.0
) -> SelectionInputs:
    """SelectionInputs as a caller fills them; ``advantage`` is deliberately a wrong constant
    times the sign, so the methods must standardise the rewards themselves."""
    cols: dict[str, list[float]] = {k: [] for k in ("h", "lp", "old", "ref", "rew", "adv")}
    ans_idx, grp_idx = [], []
    a_id = 0
    for g, answers in enumerate(groups):
        mean = statistics.fmean(a.reward for a in answers)
        for ans in answers:
            n = len(ans.entropy)
            cols["h"] += ans.entropy
            cols["lp"] += ans.logp
            cols["old"] += ans.old
            cols["ref"] += ans.ref
            cols["rew"] += [ans.reward] * n
            cols["adv"] += [caller_advantage * (ans.reward - mean)] * n
            ans_idx += [a_id] * n
            grp_idx += [g] * n
            a_id += 1
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in cols.items()}
    ratio = torch.exp(t["lp"] - t["old"])
    adv = t["adv"]
    clipped = ((ratio > 1 + EPS_HIGH) & (adv > 0)) | ((ratio < 1 - EPS_LOW) & (adv < 0))
    kl = beta * torch.expm1(t["ref"] - t["lp"])
    coef = ratio * (~clipped).double() * adv + kl
    return SelectionInputs(
        entropy=t["h"],
        logprob=t["lp"],
        grad_norm=torch.ones_like(t["h"]),
        grad_proxy=coef.abs(),
        signal_scale=coef.abs(),
        answer_index=torch.tensor(ans_idx),
        group_index=torch.tensor(grp_idx),
        advantage=adv,
        ratio=ratio,
        clipped=clipped,
        coef=coef,
        kl_coef=kl,
        reward=t["rew"],
    )


def _answer(reward: float, entropy: list[float], shift: float = 0.0, ref: float = 0.1) -> Answer:
    n = len(entropy)
    logp = [-0.5 - 0.1 * i for i in range(n)]
    return Answer(
        reward,
        entropy,
        logp,
        [lp - shift * ((-1) ** i) for i, lp in enumerate(logp)],
        [lp + ref * (i % 3 - 1) for i, lp in enumerate(logp)],
    )


def batch() -> list[list[Answer]]:
    """Three groups: mixed signs with unequal lengths and a ratio that clips some tokens;
    two answers with equal rewards and identical tokens (bit-equal scores, ties on the
    boundary); a zero-signal group."""
    g0 = [
        _answer(1.0, [0.9, 0.2, 1.7, 0.4, 1.1, 0.05, 0.6], shift=0.3),
        _answer(0.0, [1.3, 0.8, 0.1], shift=0.3),
        _answer(0.5, [0.7, 2.0, 0.3, 0.9, 0.2], shift=0.35),
        _answer(0.0, [0.4, 0.4, 1.5, 0.6, 0.3, 0.8, 1.0, 0.2, 0.9, 1.2, 0.5]),
    ]
    same = [1.0, 0.5, 1.0, 0.25, 1.0]
    g1 = [_answer(1.0, same), _answer(1.0, same), _answer(0.0, [0.1, 0.3, 0.1, 0.2])]
    g2 = [_answer(0.3, [0.5, 0.9, 1.4]), _answer(0.3, [1.1, 0.2, 0.7, 0.6])]
    return [g0, g1, g2]


def _kept(sel_mask: torch.Tensor, x: SelectionInputs) -> set[tuple[int, int]]:
    pos = []
    for i in range(x.num_tokens):
        pos.append(i if i == 0 or x.answer_index[i] != x.answer_index[i - 1] else pos[-1])
    return {(int(x.answer_index[i]), i - pos[i]) for i in range(x.num_tokens) if bool(sel_mask[i])}


@pytest.mark.parametrize("beta", [0.0, 0.001, 0.5])
@pytest.mark.parametrize("ratio", [0.2, 0.5, 0.7, 0.9])
def test_gmts_paper_is_framework1(beta: float, ratio: float) -> None:
    groups = batch()
    x = inputs(groups, beta)
    rows = _rows(groups, beta, unbiased=False, length_norm=True)
    sel = select(x, "gmts_paper", ratio, "group")
    assert_close(sel.scores.double(), torch.tensor([r[3] for r in rows], dtype=torch.float64))
    assert _kept(sel.selected, x) == framework1_expected(rows, ratio)


@pytest.mark.parametrize("beta", [0.0, 0.001, 0.5])
@pytest.mark.parametrize("ratio", [0.2, 0.5, 0.8, 0.9])
def test_gmts_paper_verl_is_framework2(beta: float, ratio: float) -> None:
    groups = batch()
    x = inputs(groups, beta)
    rows = _rows(groups, beta, unbiased=True, length_norm=False)
    sel = select(x, "gmts_paper_verl", ratio, "group")
    assert_close(sel.scores.double(), torch.tensor([r[3] for r in rows], dtype=torch.float64))
    assert _kept(sel.selected, x) == framework2_expected(rows, ratio)


def test_boundary_ties_keep_the_later_tokens_or_drop_all() -> None:
    """Group 1's first two answers are identical: bit-equal scores. At ratio 0.2 (14 tokens,
    ceil(11.2) = 12 removed) Framework1 keeps 2: the highest score (1.0 at positions 0, 2, 4 of
    both answers, six-way tie) -> the last two of the tie in (answer, position) order.
    Framework2 keeps what is strictly above its threshold."""
    groups = batch()
    x = inputs(groups, 0.0)
    sel = select(x, "gmts_paper", 0.2, "group")
    first = int((x.group_index == 1).nonzero()[0])
    a0 = int(x.answer_index[first])
    kept_g1 = {k for k in _kept(sel.selected, x) if k[0] in (a0, a0 + 1, a0 + 2)}
    assert kept_g1 == {(a0 + 1, 2), (a0 + 1, 4)}
    scores = sel.scores[x.group_index == 1]
    assert bool(scores[0] == scores[5])  # the two identical answers score bit-equally
    # Framework2: every tie at the threshold dropped; never a score-0 token
    verl = select(x, "gmts_paper_verl", 0.2, "group")
    g1 = x.group_index == 1
    kept = verl.scores[g1][verl.selected[g1]]
    dropped = verl.scores[g1][~verl.selected[g1]]
    assert kept.numel() == 0 or float(kept.min()) > float(dropped.max())


def test_zero_signal_group() -> None:
    """Group 2: equal rewards, A = 0. beta = 0: every score exactly 0 -> Framework1 keeps the
    last floor-count tokens, Framework2 keeps none; beta > 0: the KL part ranks them."""
    groups = batch()
    x = inputs(groups, 0.0)
    g2 = x.group_index == 2
    sel = select(x, "gmts_paper", 0.2, "group")
    assert bool((sel.scores[g2] == 0).all())
    assert sel.selected[g2].tolist() == [False] * 6 + [True]  # 7 tokens: 6 removed, the last kept
    assert not bool(select(x, "gmts_paper_verl", 0.2, "group").selected[g2].any())
    xb = inputs(groups, 0.5)
    assert bool((select(xb, "gmts_paper", 0.2, "group").scores[g2] > 0).any())


def test_kept_counts_follow_selected_percent() -> None:
    """ratio 0.2 = selected_percent 0.8: 1001 tokens in one group keep 200 (not 201)."""
    n = 1001
    gen = torch.Generator().manual_seed(0)
    h = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
    ones = torch.ones(n, dtype=torch.float64)
    x = SelectionInputs(
        entropy=h,
        logprob=-ones,
        grad_norm=ones,
        grad_proxy=h,
        signal_scale=ones,
        answer_index=torch.arange(n) // 77,
        group_index=torch.zeros(n, dtype=torch.long),
        advantage=torch.where(torch.arange(n) // 77 % 2 == 0, ones, -ones),
    )
    assert int(select(x, "gmts_paper", 0.2, "group").selected.sum()) == 200
    assert int(select(x, "gmts_paper_verl", 0.2, "group").selected.sum()) == 1001 - 800


def test_registrations_name_the_released_code() -> None:
    for name, path in (
        ("gmts_paper", "GMTS-Framework1/grpo_tools/grpo.py"),
        ("gmts_paper_verl", "GMTS-Framework2/verl/workers/actor/dp_actor.py"),
    ):
        info = method_info(name)
        assert "outongyiLv/GMTS" in info.details and path in info.details.replace("/ ", "/")
        assert default_scope([name]) == "group"


def test_analysis_shared_contexts_tie_and_framework1_keeps_the_later(
    tiny_llama: LoadedModel,
) -> None:
    """Through analyze(): answers that share their first tokens get bit-equal statistics, and
    gmts_paper's selection equals Framework1's rule recomputed from the records."""
    group = GroupInput(
        "Q: 47+38=?",
        answers=[" 85 yes", " 85 yes", " 84 no", " 7+8=15 so 85"],
        rewards=[1.0, 1.0, 0.0, 0.5],
    )
    result = analyze(
        tiny_llama,
        [group],
        AnalysisConfig(methods=("gmts_paper", "gmts_paper_verl"), top_alternatives=0),
    )
    answers = result.groups[0].answers
    adv = _std_advantages([a.reward for a in answers], unbiased=False)
    rows = []
    for ai, (ans, A) in enumerate(zip(answers, adv, strict=True)):
        for t, tok in enumerate(ans.tokens):
            rows.append((0, ai, t, tok.entropy * abs(A) / (len(answers) * len(ans.tokens))))
    got = {
        (ai, t)
        for ai, a in enumerate(answers)
        for t, tok in enumerate(a.tokens)
        if tok.selected["gmts_paper"]
    }
    assert got == framework1_expected(rows, 0.2)
    assert answers[0].tokens[0].scores["gmts_paper"] == answers[1].tokens[0].scores["gmts_paper"]
    assert_close(
        torch.tensor([tok.scores["gmts_paper"] for a in answers for tok in a.tokens]),
        torch.tensor([r[3] for r in rows]),
        rtol=1e-6,
        atol=0.0,
    )
