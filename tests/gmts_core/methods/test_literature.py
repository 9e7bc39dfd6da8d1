"""The literature's criteria (gmts_core/methods/other_papers.py) on hand-built batches.

Every expected score below is worked out by hand in the comments (or by a naive loop written
here from the paper's formula), not taken from the implementation.
"""

from __future__ import annotations

import math

import pytest
import torch

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.errors import InvalidInputError
from gmts_core.methods.catalog import method_catalog
from gmts_core.methods.other_papers import answer_positions, gtpo_advantages
from gmts_core.methods.selection import SelectionInputs, list_methods, select
from gmts_core.model.loading import LoadedModel

LITERATURE = ("clip_cov", "kl_cov", "lopti", "gtpo", "rsi", "high_prob")


def batch(
    advantage: list[float],
    logprob: list[float],
    entropy: list[float],
    answers: list[int],
    groups: list[int] | None = None,
) -> SelectionInputs:
    """Per-token inputs; the quantities the literature methods do not read are zeros."""
    n = len(advantage)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    zeros = torch.zeros(n, dtype=torch.float64)
    return SelectionInputs(
        entropy=t(entropy),
        logprob=t(logprob),
        grad_norm=zeros,
        grad_proxy=zeros,
        signal_scale=t(advantage).abs(),
        answer_index=torch.tensor(answers),
        group_index=torch.tensor(groups if groups is not None else [0] * n),
        advantage=t(advantage),
    )


def scores(x: SelectionInputs, method: str) -> torch.Tensor:
    return select(x, method, ratio=0.2).scores


# Answers 0 and 1 (A = +1: tokens 0, 1), answers 2 and 3 (A = -1: tokens 2, 3), answer 4 (A = 0).
COV_BATCH = dict(
    advantage=[1.0, 1.0, -1.0, -1.0, 0.0],
    logprob=[-1.0, -2.0, 0.0, -3.0, 0.0],
    entropy=[1.0, 1.0, 1.0, 1.0, 1.0],
    answers=[0, 1, 2, 3, 4],
)


def test_kl_cov_is_the_advantage_logprob_covariance_term() -> None:
    # mean A = 0, mean log p = -6/5 = -1.2, Cov_t = A_t (log p_t + 1.2):
    # 1 * 0.2, 1 * -0.8, -1 * 1.2, -1 * -1.8, 0
    expected = torch.tensor([0.2, -0.8, -1.2, 1.8, 0.0], dtype=torch.float64)
    x = batch(**COV_BATCH)
    torch.testing.assert_close(scores(x, "kl_cov"), expected)
    # k = ceil(0.2 * 5) = 1: the largest covariance, token 3
    assert select(x, "kl_cov", 0.2).selected.tolist() == [False, False, False, True, False]


def test_clip_cov_keeps_only_the_band_between_one_and_five() -> None:
    # the same covariances; only 1.8 lies in (1, 5)
    expected = torch.tensor([0.0, 0.0, 0.0, 1.8, 0.0], dtype=torch.float64)
    torch.testing.assert_close(scores(batch(**COV_BATCH), "clip_cov"), expected)
    # A = +-2, log p = 0 and -6: means 0 and -3, Cov = 2 * 3 = 6 and -2 * -3 = 6, above 5
    high = batch([2.0, -2.0], [0.0, -6.0], [1.0, 1.0], [0, 1])
    torch.testing.assert_close(
        scores(high, "kl_cov"), torch.tensor([6.0, 6.0], dtype=torch.float64)
    )
    torch.testing.assert_close(scores(high, "clip_cov"), torch.zeros(2, dtype=torch.float64))


def test_clip_cov_leaves_out_tokens_ppo_already_clipped() -> None:
    # verl compute_policy_loss_clip_cov: cov_all[clip_by_origin] = -inf before the band test
    x = batch(**COV_BATCH)
    x.clipped = torch.tensor([False, False, False, True, False])
    torch.testing.assert_close(scores(x, "clip_cov"), torch.zeros(5, dtype=torch.float64))
    x.clipped = torch.tensor([True, False, False, False, False])
    assert scores(x, "clip_cov").tolist() == [0.0, 0.0, 0.0, pytest.approx(1.8), 0.0]


def test_covariance_means_per_micro_batch() -> None:
    # micro-batches {0, 1} and {2, 3, 4}: means A 1 | -2/3, log p -1.5 | -1
    x = batch(**COV_BATCH)
    x.micro_batch = torch.tensor([0, 0, 1, 1, 1])
    adv, lp = COV_BATCH["advantage"], COV_BATCH["logprob"]
    means = [(1.0, -1.5)] * 2 + [(-2 / 3, -1.0)] * 3
    expected = [(a - ma) * (p - mp) for a, p, (ma, mp) in zip(adv, lp, means, strict=True)]
    torch.testing.assert_close(scores(x, "kl_cov"), torch.tensor(expected, dtype=torch.float64))
    assert not torch.allclose(scores(x, "kl_cov"), scores(batch(**COV_BATCH), "kl_cov"))


def test_lopti_is_eta_minus_pi_old_positive_below_0_4() -> None:
    x = batch(**COV_BATCH)  # p = e^-1, e^-2, 1, e^-3, 1
    expected = [0.4 - 0.36787944, 0.4 - 0.13533528, -0.6, 0.4 - 0.04978707, -0.6]
    torch.testing.assert_close(
        scores(x, "lopti"), torch.tensor(expected, dtype=torch.float64), atol=1e-8, rtol=0
    )
    # the same ranking as surprisal (the same paper) on-policy
    assert torch.equal(select(x, "lopti", 0.6).ranks, select(x, "surprisal", 0.6).ranks)
    # the split is on pi_old = pi_theta / r (AR-Lopti: exp(old_log_probs) < eta)
    x.ratio = torch.tensor([2.0, 1.0, 1.0, 0.5, 1.0], dtype=torch.float64)
    pi_old = [math.exp(-1) / 2, math.exp(-2), 1.0, math.exp(-3) * 2, 1.0]
    torch.testing.assert_close(
        scores(x, "lopti"), torch.tensor([0.4 - p for p in pi_old], dtype=torch.float64)
    )


GTPO_BATCH = dict(
    advantage=[1, 1, 1, -1, -1, -1, -1, 0.5, 0.0],
    logprob=[-1.0] * 9,
    entropy=[1.0, 3.0, 3.0, 0.5, 2.0, 2.0, 2.0, 4.0, 1.0],
    answers=[0, 0, 1, 2, 2, 3, 3, 4, 5],
    groups=[0, 0, 0, 0, 0, 0, 0, 1, 1],
)


def test_gtpo_is_eq6_z_scores_per_group_and_outcome() -> None:
    # group 0: answers 0, 1 succeed (A = +1), answers 2, 3 fail (A = -1); group 1: answer 4
    # succeeds alone (A = +0.5), answer 5 has A = 0.
    # shares (eqs. 3-4): successes t = 0 {H 1, 3}: 0.5, 1.5; t = 1 {H 3}: 1.
    #   failures t = 0 1/H {2, 0.5}: 1.6, 0.4; t = 1 1/H {0.5, 0.5}: 1, 1.
    # shaped r~+ = 1 + 0.1 share: a0 (1.05, 1.1), a1 1.15 -> mean 1.1, pop std 0.05 sqrt(2/3)
    #   -> A~ = (-sqrt(3/2), 0), sqrt(3/2).
    # shaped r~- = -1 - 0.1 share: a2 (-1.16, -1.1), a3 (-1.04, -1.1) -> mean -1.1,
    #   pop std 0.06 / sqrt(2) -> A~ = (-sqrt 2, 0), (sqrt 2, 0).
    # group 1: one successful token (std 0) -> 0; A = 0 -> 0.
    x = batch(**GTPO_BATCH)
    r32, r2 = math.sqrt(1.5), math.sqrt(2.0)
    signed = [-r32, 0.0, r32, -r2, 0.0, r2, 0.0, 0.0, 0.0]
    torch.testing.assert_close(
        gtpo_advantages(x.advantage, x.entropy, x.answer_index, x.group_index),
        torch.tensor(signed, dtype=torch.float64),
        atol=1e-9,
        rtol=1e-9,
    )
    torch.testing.assert_close(
        scores(x, "gtpo"), torch.tensor([abs(v) for v in signed], dtype=torch.float64)
    )
    # a successful answer's token can get a negative shaped advantage (the sign can change)
    assert signed[0] < 0 < GTPO_BATCH["advantage"][0]


def naive_gtpo(
    adv: list[float], ent: list[float], ans: list[int], grp: list[int], rew: list[float]
) -> list[float]:
    """Eqs. 3, 4 and 6 of the paper with plain loops: shaped rewards, then a z-score over the
    group's successful tokens and, separately, over its failed tokens."""
    pos = [ans[:i].count(ans[i]) for i in range(len(ans))]
    shaped = []
    for i, a in enumerate(adv):
        if a == 0:
            shaped.append(0.0)
            continue
        same = [j for j in range(len(adv)) if grp[j] == grp[i] and pos[j] == pos[i]]
        if a > 0:
            peers = [ent[j] for j in same if adv[j] > 0]
            share = len(peers) * ent[i] / sum(peers) if sum(peers) > 0 else 0.0
            shaped.append(rew[i] + 0.1 * share)
        else:
            peers = [1 / (ent[j] + 1e-8) for j in same if adv[j] < 0]
            share = len(peers) * (1 / (ent[i] + 1e-8)) / sum(peers)
            shaped.append(rew[i] - 0.1 * share)
    out = [0.0] * len(adv)
    for g in set(grp):
        for positive in (True, False):
            idx = [i for i in range(len(adv)) if grp[i] == g and adv[i] != 0]
            idx = [i for i in idx if (adv[i] > 0) == positive]
            if len(idx) < 2:
                continue
            vals = [shaped[i] for i in idx]
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
            for i in idx:
                out[i] = abs((shaped[i] - mean) / std) if std > 1e-8 else 0.0
    return out


def test_gtpo_equals_a_naive_loop_on_a_random_batch() -> None:
    gen = torch.Generator().manual_seed(3)
    lengths = [3, 1, 4, 2, 5, 2]
    ans = [a for a, n in enumerate(lengths) for _ in range(n)]
    grp = [0 if a < 3 else 1 for a in ans]
    adv_answer = [0.7, -1.2, 0.0, 1.1, -0.4, 0.9]
    rew_answer = [1.0, 0.0, 0.5, 1.0, 0.0, 0.8]
    adv = [adv_answer[a] for a in ans]
    rew = [rew_answer[a] for a in ans]
    ent = (torch.rand(len(ans), generator=gen, dtype=torch.float64) * 2).tolist()
    x = batch(adv, [-1.0] * len(ans), ent, ans, grp)
    x.reward = torch.tensor(rew, dtype=torch.float64)
    expected = torch.tensor(naive_gtpo(adv, ent, ans, grp, rew), dtype=torch.float64)
    torch.testing.assert_close(scores(x, "gtpo"), expected)


def test_rsi_is_minus_abs_log_of_surprisal_over_entropy() -> None:
    e = math.e
    x = batch(
        advantage=[1.0] * 6,
        logprob=[-1.0, -2.0, -0.5, 0.0, -3.0, -1.0],
        entropy=[1.0, 1.0, 1.0, 0.0, 0.0, e],
        answers=[0, 0, 0, 0, 0, 0],
    )
    # RSI = S / H: 1, 2, 0.5, (S = 0: 1e-12), (H = 0 < S: 1e12), 1 / e
    big = math.log(1e12)
    expected = [0.0, -math.log(2), -math.log(2), -big, -big, -1.0]
    torch.testing.assert_close(scores(x, "rsi"), torch.tensor(expected, dtype=torch.float64))


def test_high_prob_is_the_clipped_shifted_sigmoid_of_p() -> None:
    x = batch([1.0] * 3, [0.0, -1.0, -20.0], [1.0] * 3, [0, 0, 0])
    # w = clip(sigmoid(p) - 0.5, 0, 1): sigmoid(1) = 0.7310585786, sigmoid(e^-1) by hand
    sig = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    expected = [0.7310585786 - 0.5, sig(math.exp(-1)) - 0.5, sig(math.exp(-20)) - 0.5]
    torch.testing.assert_close(
        scores(x, "high_prob"), torch.tensor(expected, dtype=torch.float64), atol=1e-9, rtol=0
    )


def test_answer_positions_restart_at_each_answer() -> None:
    got = answer_positions(torch.tensor([0, 0, 0, 1, 2, 2]))
    assert got.tolist() == [0, 1, 2, 0, 0, 1]


@pytest.mark.parametrize("method", ["clip_cov", "kl_cov", "gtpo"])
def test_methods_needing_the_advantage_sign_say_so(method: str) -> None:
    x = batch(**COV_BATCH)
    x.advantage = None
    with pytest.raises(InvalidInputError, match="signed advantage"):
        select(x, method, 0.2)


def test_catalog_lists_every_method_with_a_citation() -> None:
    catalog = {m.name: m for m in method_catalog()}
    assert list(catalog) == list_methods()
    assert set(LITERATURE) <= set(catalog)
    for info in catalog.values():
        assert info.citation and info.description and info.details, info.name
        assert "\n" not in info.description and len(info.description) <= 100, info.name
    for name in LITERATURE:
        assert "arXiv" in catalog[name].citation
    assert catalog["gtpo"].kind == catalog["high_prob"].kind == "weighting"
    assert catalog["clip_cov"].kind == "selection"


def test_analysis_scores_match_the_formulas_on_its_own_numbers(tiny_llama: LoadedModel) -> None:
    """Through analyze(): kl_cov and high_prob recomputed from the result's own token numbers."""
    answers = [" 85", " 75 and 10", " 85 85", " 9"]
    config = AnalysisConfig(methods=tuple(list_methods()))
    res = analyze(tiny_llama, [GroupInput("Q: 47+38=?\nA:", answers, rewards=[1, 0, 1, 0])], config)
    rows = [(a.advantage, t) for a in res.groups[0].answers for t in a.tokens]
    mean_a = sum(a for a, _ in rows) / len(rows)
    mean_lp = sum(t.logprob for _, t in rows) / len(rows)
    for a, t in rows:
        assert set(LITERATURE) <= set(t.scores)
        assert t.scores["kl_cov"] == pytest.approx((a - mean_a) * (t.logprob - mean_lp), abs=1e-9)
        expected_w = 1 / (1 + math.exp(-t.prob)) - 0.5
        assert t.scores["high_prob"] == pytest.approx(expected_w, abs=1e-9)
        assert t.scores["gtpo"] >= 0 and (a != 0 or t.scores["gtpo"] == 0)
    assert res.summary["selected_count"]["gtpo"] == res.summary["k"]


def test_compare_and_rl_accept_every_literature_method() -> None:
    from gmts_core.experiments.compare import CompareConfig

    CompareConfig(methods=LITERATURE).validate()  # raises on an unknown method
    with pytest.raises(InvalidInputError, match="valid: .*clip_cov"):
        CompareConfig(methods=("clip_covv",)).validate()
