"""Token-level criteria of the RLVR literature, registered as selection methods.

Each criterion is a pure score per token over the flat batch of :class:`SelectionInputs`;
selection keeps the top k of each scope as for every method. A criterion that is a weighting
in its paper (GTPO, TR-GRPO) is scored by its weight. Each registration carries the paper,
the formula, its constants and the choices the paper leaves open (``details``), which the
method listing (``GET /v1/methods``, ``gmts methods``) shows.

Where a paper acts on the selected tokens differently from "train only on them" (Clip-Cov
detaches them, KL-Cov penalizes them, Lopti updates them first), the score still singles out
the same tokens; ``details`` says what the paper does with them.

Scores use what the caller has: an analysis is at the on-policy point (pi_old = pi_theta,
ratio 1); live RL with re-selection and the TRL trainer pass the real ratio and clip flags, so
Clip-Cov skips the tokens PPO already clipped and Lopti splits on pi_old, as their code does.
"""

from __future__ import annotations

import torch

from gmts_core.errors import InvalidInputError
from gmts_core.methods.selection import SelectionInputs, register_method

# Clip-Cov / KL-Cov (arXiv 2505.22617; PRIME-RL/Entropy-Mechanism-of-RL, verl core_algos.py)
CLIP_COV_LOW, CLIP_COV_HIGH = 1.0, 5.0  # the covariance band (clip_cov_lb, clip_cov_ub)
# Lopti (arXiv 2505.12929): tokens with pi_old < eta are updated in a first, separate pass;
# eta = 0.4 in the official script (zhyang2226/AR-Lopti: SEPERATE_PROB=0.4, "eta in the paper")
LOPTI_ETA = 0.4
# GTPO (arXiv 2508.04349): r~ = alpha1 r + alpha2 * entropy share (eqs. 3-4), then eq. 6
GTPO_ALPHA1, GTPO_ALPHA2 = 1.0, 0.1
GTPO_EPS = 1e-8  # the paper's epsilon in 1 / (H + eps) for failed answers
GTPO_STD_EPS = 1e-8  # guards eq. 6's division where every shaped reward of a set is equal
# TR-GRPO (arXiv 2511.00066): w = clip(alpha (sigmoid(p / tau) - mu), L, U)
TR_ALPHA, TR_TAU, TR_MU, TR_LOW, TR_HIGH = 1.0, 1.0, 0.5, 0.0, 1.0
RSI_CLAMP = 1e12  # RSI is clamped to [1/RSI_CLAMP, RSI_CLAMP] so every score is finite


def _signed_advantage(x: SelectionInputs, method: str) -> torch.Tensor:
    if x.advantage is None:
        raise InvalidInputError(
            f"method {method!r} needs the signed advantage A_i of each token's answer, which "
            "these inputs lack (SelectionInputs.advantage); analyses and trainer integrations "
            "supply it"
        )
    return x.advantage.double()


def answer_positions(answer_index: torch.Tensor) -> torch.Tensor:
    """Position t of each token within its answer, (N,); an answer's tokens are contiguous."""
    n = answer_index.numel()
    idx = torch.arange(n, device=answer_index.device)
    starts = torch.ones(n, dtype=torch.bool, device=answer_index.device)
    starts[1:] = answer_index[1:] != answer_index[:-1]
    first = torch.cummax(torch.where(starts, idx, torch.zeros_like(idx)), dim=0).values
    return idx - first


def advantage_logprob_covariance(
    advantage: torch.Tensor, logprob: torch.Tensor, micro_batch: torch.Tensor | None = None
) -> torch.Tensor:
    """Cov_t = (A_t - mean A) (log p_t - mean log p), (N,); the means over all N tokens, or
    over each token's micro-batch when ``micro_batch`` (N,) ids are given.

    Each token's term of the batch covariance between advantage and log-prob, which drives the
    entropy change of a softmax policy under policy gradient (arXiv 2505.22617, eq. for
    Clip-Cov / KL-Cov; verl ``compute_policy_loss_clip_cov`` / ``_kl_cov``, which take the
    means over the micro-batch each rank's loss sees).
    """
    a, lp = advantage.double(), logprob.double()
    if micro_batch is None:
        return (a - a.mean()) * (lp - lp.mean())
    _, slot = torch.unique(micro_batch.cpu(), return_inverse=True)
    slot = slot.to(a.device)
    count = torch.bincount(slot).double()
    mean = lambda v: (torch.bincount(slot, weights=v) / count)[slot]  # noqa: E731
    return (a - mean(a)) * (lp - mean(lp))


@register_method(
    "kl_cov",
    "KL-Cov: tokens with the largest advantage/log-prob covariance (the ones KL-Cov penalizes)",
    citation="arXiv 2505.22617, The Entropy Mechanism of RL for Reasoning LMs (KL-Cov)",
    details=(
        "score = Cov_t = (A_t - mean A)(log p_t - mean log p), means over every answer token "
        "of the batch, or of each micro-batch where the caller has them (the TRL trainer: each "
        "process's micro-batch, as verl compute_policy_loss_kl_cov does). The paper adds the "
        "penalty "
        "|log pi - log pi_old| (coef 1) to the top k = 0.0002 N of these tokens; here the top "
        "k of the ratio are the selected tokens. Selected means 'the tokens KL-Cov acts on', "
        "not 'the tokens it trains on': training only on them (gmts compare) is not KL-Cov."
    ),
)
def kl_cov_score(x: SelectionInputs) -> torch.Tensor:
    return advantage_logprob_covariance(_signed_advantage(x, "kl_cov"), x.logprob, x.micro_batch)


@register_method(
    "clip_cov",
    "Clip-Cov: covariance in the band [1, 5] (the tokens Clip-Cov detaches), highest first",
    citation="arXiv 2505.22617, The Entropy Mechanism of RL for Reasoning LMs (Clip-Cov)",
    details=(
        "score = Cov_t if 1 < Cov_t < 5 else 0, Cov_t as for kl_cov (verl clip_cov_lb=1, "
        "clip_cov_ub=5). The paper detaches the gradient of r N tokens (r = 0.0002) drawn "
        "uniformly at random from the band; a score must rank, so in-band tokens are ranked "
        "by their covariance (choice), and when the band holds fewer than k tokens the rest "
        "of the budget goes to score-0 tokens in (answer, position) order. As verl, tokens "
        "PPO already clipped (the clipped objective flat, SelectionInputs.clipped) are left out "
        "of the band (score 0); none are at the on-policy point of an analysis (ratio 1), the "
        "live RL re-selection and the TRL trainer pass the real ones. Means per micro-batch "
        "where the caller has them (the TRL trainer: each process's, as verl's loss). "
        "The band assumes std-normalized advantages (grpo); with dr_grpo/rloo it is rarely hit."
    ),
)
def clip_cov_score(x: SelectionInputs) -> torch.Tensor:
    cov = advantage_logprob_covariance(_signed_advantage(x, "clip_cov"), x.logprob, x.micro_batch)
    in_band = (cov > CLIP_COV_LOW) & (cov < CLIP_COV_HIGH)
    if x.clipped is not None:
        in_band &= ~x.clipped.to(in_band.device).bool()
    return torch.where(in_band, cov, torch.zeros_like(cov))


@register_method(
    "lopti",
    "Lopti: low-probability tokens (pi_old < 0.4), lowest probability first",
    citation="arXiv 2505.12929, Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs",
    details=(
        "score = eta - pi_old with eta = 0.4, the official script's value (zhyang2226/AR-Lopti, "
        "SEPERATE_PROB=0.4, 'eta in the paper'); the split is on pi_old at the rollout "
        "temperature, as that script's exp(old_log_probs) < eta: pi_old = pi_theta / r from the "
        "caller's ratio (1 in an analysis, where pi_old = pi). Positive exactly for the tokens "
        "Lopti isolates, which it updates in a first pass before the high-probability ones. "
        "The ranking equals surprisal's at ratio 1; the score's sign tells the paper's split "
        "(its set has a variable size, here top k)."
    ),
)
def lopti_score(x: SelectionInputs) -> torch.Tensor:
    log_old = x.logprob.double()
    if x.ratio is not None:
        log_old = log_old - x.ratio.double().log()  # log pi_old = log pi_theta - log r
    return LOPTI_ETA - log_old.exp()


def gtpo_entropy_share(
    advantage: torch.Tensor,
    entropy: torch.Tensor,
    answer_index: torch.Tensor,
    group_index: torch.Tensor,
) -> torch.Tensor:
    """GTPO's normalized entropy at each token, (N,) (arXiv 2508.04349, eqs. for O+ and O-).

    Successful answers (A > 0): H_it / mean_k H_kt over the group's successful answers that
    have a token at position t (= d_t H_it / sum_k H_kt). Failed answers (A < 0): the same with
    1 / (H + eps), so confident mistakes get the larger share. 0 where A = 0.
    """
    a, h = advantage.double(), entropy.double()
    pos = answer_positions(answer_index)
    key = group_index.long() * (int(pos.max()) + 1 if pos.numel() else 1) + pos  # (group, t)
    share = torch.zeros_like(h)
    for mask, value in ((a > 0, h), (a < 0, 1.0 / (h + GTPO_EPS))):
        if not bool(mask.any()):
            continue
        size = int(key.max()) + 1
        sums = torch.zeros(size, dtype=h.dtype).index_add_(0, key[mask], value[mask])
        counts = torch.zeros(size, dtype=h.dtype).index_add_(0, key[mask], torch.ones_like(h[mask]))
        mean = sums[key[mask]] / counts[key[mask]]
        share[mask] = torch.where(mean > 0, value[mask] / mean, torch.zeros_like(mean))
    return share


def gtpo_advantages(
    advantage: torch.Tensor,
    entropy: torch.Tensor,
    answer_index: torch.Tensor,
    group_index: torch.Tensor,
    reward: torch.Tensor | None = None,
) -> torch.Tensor:
    """GTPO's token advantage, eq. 6 (arXiv 2508.04349), (N,) float64.

    Shaped rewards (eqs. 3-4): r~+_it = alpha1 r_i + alpha2 share+_it for a successful answer
    (A > 0), r~-_jt = alpha1 r_j - alpha2 share-_jt for a failed one (A < 0), with the entropy
    shares of :func:`gtpo_entropy_share`. Eq. 6: within each group, the successful answers'
    shaped token rewards are z-scored together, A~+ = (r~+ - mean R~+) / std R~+, and the failed
    ones' separately, A~- = (r~- - mean R~-) / std R~- (population std; 0 where a set's rewards
    are all equal). A~ can change sign within an answer. A = 0: 0. ``reward`` None: r = A.
    """
    a = advantage.double()
    r = a if reward is None else reward.double().to(a.device)
    share = gtpo_entropy_share(a, entropy, answer_index, group_index)
    out = torch.zeros_like(a)
    groups = group_index.to(a.device)
    for g in torch.unique(groups):
        for sign in (1.0, -1.0):
            m = (groups == g) & (torch.sign(a) == sign)
            if not bool(m.any()):
                continue
            shaped = GTPO_ALPHA1 * r[m] + sign * GTPO_ALPHA2 * share[m]
            std = shaped.std(unbiased=False) if shaped.numel() > 1 else shaped.new_zeros(())
            if float(std) <= GTPO_STD_EPS:
                continue
            out[m] = (shaped - shaped.mean()) / std
    return out


@register_method(
    "gtpo",
    "GTPO: |A~| of eq. 6, shaped token rewards z-scored per group and outcome (a weighting)",
    citation="arXiv 2508.04349, GTPO and GRPO-S: Token and Sequence-Level Reward Shaping",
    kind="weighting",
    details=(
        "score = |A~_it|, GTPO's token advantage (eq. 6): the shaped rewards r~+_it = alpha1 "
        "r_i + alpha2 H_norm_it of the group's successful answers (A > 0) are z-scored together, "
        "those of its failed answers, r~-_jt = alpha1 r_j - alpha2 H_norm_jt, separately; "
        "alpha1 = 1, alpha2 = 0.1. H_norm_it = d_t H_it / sum_k H_kt over the group's successful "
        "answers with a token at position t (d_t of them); for failed answers the same with "
        "1 / (H + 1e-8), so confident mistakes weigh more. A token's A~ depends on how far its "
        "entropy share is from its set's mean and can change sign within an answer; 0 where "
        "A = 0. Choices: success is A > 0 (the paper splits by binary reward), r is the "
        "answer's reward where the caller supplies it (else A), the std is the population std, "
        "and the score is the magnitude of the token's weight on d log pi."
    ),
)
def gtpo_score(x: SelectionInputs) -> torch.Tensor:
    a = _signed_advantage(x, "gtpo")
    return gtpo_advantages(a, x.entropy, x.answer_index, x.group_index, x.reward).abs()


def relative_surprisal_index(logprob: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
    """RSI_t = S_t / H_t: the token's surprisal -log p over the entropy (expected surprisal).

    Clamped to [1e-12, 1e12]; S = 0 (a certain token) gives the low end, H = 0 < S the high.
    """
    s = (-logprob.double()).clamp_min(0.0)
    h = entropy.double()
    lo, hi = 1.0 / RSI_CLAMP, RSI_CLAMP
    ratio = torch.where(h > 0, s / h.clamp_min(1e-300), torch.where(s > 0, hi, lo))
    return ratio.clamp(lo, hi)


@register_method(
    "rsi",
    "RSI: relative surprisal S/H nearest 1 (drops both redundant and tail tokens)",
    citation="arXiv 2606.31575, Which Tokens Matter? Adaptive Token Selection with the RSI",
    details=(
        "score = -|ln RSI|, RSI = (-log p) / H. Only the paper's abstract could be read: RSI "
        "couples entropy with the sampled token's probability and RSI-S keeps tokens inside a "
        "stable RSI interval, dropping redundant low-surprisal and unstable high-surprisal "
        "tail tokens. Choices (the paper's own formula and interval were not available): RSI "
        "is surprisal over entropy (its expectation under the policy), and the interval is "
        "centred at RSI = 1 in log space, its width set by the selection ratio. Clamped to "
        "[1e-12, 1e12]."
    ),
)
def rsi_score(x: SelectionInputs) -> torch.Tensor:
    return -relative_surprisal_index(x.logprob, x.entropy).log().abs()


@register_method(
    "high_prob",
    "TR-GRPO: weight rising with the token's probability (a weighting, scored by weight)",
    citation="arXiv 2511.00066, Token-Regulated GRPO (TR-GRPO)",
    kind="weighting",
    details=(
        "score = w_t = clip(alpha (sigmoid(p / tau) - mu), L, U) with alpha = 1, tau = 1, "
        "mu = 0.5, L = 0, U = 1: the form of TR-GRPO's probability shaping; the constants are "
        "those of a public reimplementation, the paper's own values could not be read "
        "(choice). The weight is monotone in p, so the ranking is the token probability's."
    ),
)
def high_prob_score(x: SelectionInputs) -> torch.Tensor:
    p = x.logprob.double().exp()
    return (TR_ALPHA * (torch.sigmoid(p / TR_TAU) - TR_MU)).clamp(TR_LOW, TR_HIGH)
