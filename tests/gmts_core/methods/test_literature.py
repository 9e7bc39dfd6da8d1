"""The literature's criteria (gmts_core/methods/literature.py) on hand-built batches.

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
from gmts_core.methods.literature import answer_positions
from gmts_core.methods.selection import SelectionInputs, list_methods, select
from gmts_core.modeling import LoadedModel

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


def test_lopti_is_eta_minus_p_positive_below_one_half() -> None:
    x = batch(**COV_BATCH)  # p = e^-1, e^-2, 1, e^-3, 1
    expected = [0.5 - 0.36787944, 0.5 - 0.13533528, -0.5, 0.5 - 0.04978707, -0.5]
    torch.testing.assert_close(
        scores(x, "lopti"), torch.tensor(expected, dtype=torch.float64), atol=1e-8, rtol=0
    )
    # the same ranking as surprisal (the same paper)
    assert torch.equal(select(x, "lopti", 0.6).ranks, select(x, "surprisal", 0.6).ranks)


def test_gtpo_shapes_by_entropy_share_within_group_and_position() -> None:
    # group 0: answers 0, 1 succeed (A = +1), answers 2, 3 fail (A = -1); group 1: answer 4
    # succeeds (A = +0.5), answer 5 has A = 0.
    x = batch(
        advantage=[1, 1, 1, -1, -1, -1, -1, 0.5, 0.0],
        logprob=[-1.0] * 9,
        entropy=[1.0, 3.0, 3.0, 0.5, 2.0, 2.0, 2.0, 4.0, 1.0],
        answers=[0, 0, 1, 2, 2, 3, 3, 4, 5],
        groups=[0, 0, 0, 0, 0, 0, 0, 1, 1],
    )
    # t = 0, successes {H 1, 3}: mean 2, shares 0.5, 1.5; t = 1, {H 3}: share 1.
    # t = 0, failures 1/H {2, 0.5}: mean 1.25, shares 1.6, 0.4; t = 1, 1/H {0.5, 0.5}: 1, 1.
    # group 1, t = 0, successes {4}: share 1 (not pooled with group 0); A = 0: score 0.
    # score = |A| (1 + 0.1 share)
    expected = [1.05, 1.1, 1.15, 1.16, 1.1, 1.04, 1.1, 0.55, 0.0]
    torch.testing.assert_close(
        scores(x, "gtpo"), torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0
    )


def naive_gtpo(adv: list[float], ent: list[float], ans: list[int], grp: list[int]) -> list[float]:
    """The paper's shaped reward magnitude, position by position, with plain loops."""
    pos = [ans[:i].count(ans[i]) for i in range(len(ans))]
    out = []
    for i, a in enumerate(adv):
        if a == 0:
            out.append(0.0)
            continue
        same = [j for j in range(len(adv)) if grp[j] == grp[i] and pos[j] == pos[i]]
        if a > 0:
            peers = [ent[j] for j in same if adv[j] > 0]
            share = len(peers) * ent[i] / sum(peers) if sum(peers) > 0 else 0.0
        else:
            peers = [1 / (ent[j] + 1e-8) for j in same if adv[j] < 0]
            share = len(peers) * (1 / (ent[i] + 1e-8)) / sum(peers)
        out.append(abs(a) * (1 + 0.1 * share))
    return out


def test_gtpo_equals_a_naive_loop_on_a_random_batch() -> None:
    gen = torch.Generator().manual_seed(3)
    lengths = [3, 1, 4, 2, 5, 2]
    ans = [a for a, n in enumerate(lengths) for _ in range(n)]
    grp = [0 if a < 3 else 1 for a in ans]
    adv_answer = [0.7, -1.2, 0.0, 1.1, -0.4, 0.9]
    adv = [adv_answer[a] for a in ans]
    ent = (torch.rand(len(ans), generator=gen, dtype=torch.float64) * 2).tolist()
    x = batch(adv, [-1.0] * len(ans), ent, ans, grp)
    expected = torch.tensor(naive_gtpo(adv, ent, ans, grp), dtype=torch.float64)
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
        assert t.scores["gtpo"] >= abs(a) and (t.scores["gtpo"] > 0) == (a != 0)
    assert res.summary["selected_count"]["gtpo"] == res.summary["k"]


def test_compare_and_rl_accept_every_literature_method() -> None:
    from gmts_core.experiments.compare import CompareConfig

    CompareConfig(methods=LITERATURE).validate()  # raises on an unknown method
    with pytest.raises(InvalidInputError, match="valid: .*clip_cov"):
        CompareConfig(methods=("clip_covv",)).validate()
