"""Token-level criteria of the RLVR literature, registered as selection methods.

Each criterion is a pure score per token over the flat batch of :class:`SelectionInputs`;
selection keeps the top k of each scope as for every method. A criterion that is a weighting
in its paper (GTPO, TR-GRPO) is scored by its weight. Each registration carries the paper,
the formula, its constants and the choices the paper leaves open (``details``), which the
method listing (``GET /v1/methods``, ``gmts methods``) shows.

Where a paper acts on the selected tokens differently from "train only on them" (Clip-Cov
detaches them, KL-Cov penalizes them, Lopti updates them first), the score still singles out
the same tokens; ``details`` says what the paper does with them.

All scores are computed at the on-policy point the analysis sees (pi_old = pi_theta, ratio 1),
from quantities every analysis has (entropy, log-prob, signed advantage): none needs a
reference model or a previous policy. The one place a previous policy would matter (Clip-Cov
skips tokens PPO already clipped) is empty at ratio 1, and ``details`` says so.
"""

from __future__ import annotations

import torch

from gmts_core.errors import InvalidInputError
from gmts_core.methods.selection import SelectionInputs, register_method

# Clip-Cov / KL-Cov (arXiv 2505.22617; PRIME-RL/Entropy-Mechanism-of-RL, verl core_algos.py)
CLIP_COV_LOW, CLIP_COV_HIGH = 1.0, 5.0  # the covariance band (clip_cov_lb, clip_cov_ub)
# Lopti (arXiv 2505.12929): tokens with p < eta are updated in a first, separate pass
LOPTI_ETA = 0.5
# GTPO (arXiv 2508.04349): r~ = alpha1 r + alpha2 * entropy share; beta = alpha2 / alpha1
GTPO_BETA = 0.1
GTPO_EPS = 1e-8  # the paper's epsilon in 1 / (H + eps) for failed answers
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


def advantage_logprob_covariance(advantage: torch.Tensor, logprob: torch.Tensor) -> torch.Tensor:
    """Cov_t = (A_t - mean A) (log p_t - mean log p), means over all N tokens, (N,).

    Each token's term of the batch covariance between advantage and log-prob, which drives the
    entropy change of a softmax policy under policy gradient (arXiv 2505.22617, eq. for
    Clip-Cov / KL-Cov; verl ``compute_policy_loss_clip_cov`` / ``_kl_cov``).
    """
    a, lp = advantage.double(), logprob.double()
    return (a - a.mean()) * (lp - lp.mean())


@register_method(
    "kl_cov",
    "KL-Cov: tokens with the largest advantage/log-prob covariance (the ones KL-Cov penalizes)",
    citation="arXiv 2505.22617, The Entropy Mechanism of RL for Reasoning LMs (KL-Cov)",
    details=(
        "score = Cov_t = (A_t - mean A)(log p_t - mean log p), means over every answer token "
        "of the batch (verl compute_policy_loss_kl_cov). The paper adds the penalty "
        "|log pi - log pi_old| (coef 1) to the top k = 0.0002 N of these tokens; here the top "
        "k of the ratio are the selected tokens. Selected means 'the tokens KL-Cov acts on', "
        "not 'the tokens it trains on': training only on them (gmts compare) is not KL-Cov."
    ),
)
def kl_cov_score(x: SelectionInputs) -> torch.Tensor:
    return advantage_logprob_covariance(_signed_advantage(x, "kl_cov"), x.logprob)


@register_method(
    "clip_cov",
    "Clip-Cov: covariance in the band [1, 5] (the tokens Clip-Cov detaches), highest first",
    citation="arXiv 2505.22617, The Entropy Mechanism of RL for Reasoning LMs (Clip-Cov)",
    details=(
        "score = Cov_t if 1 < Cov_t < 5 else 0, Cov_t as for kl_cov (verl clip_cov_lb=1, "
        "clip_cov_ub=5). The paper detaches the gradient of r N tokens (r = 0.0002) drawn "
        "uniformly at random from the band; a score must rank, so in-band tokens are ranked "
        "by their covariance (choice), and when the band holds fewer than k tokens the rest "
        "of the budget goes to score-0 tokens in (answer, position) order. The paper also "
        "skips tokens PPO already clipped: none at the on-policy point scored here (ratio 1). "
        "The band assumes std-normalized advantages (grpo); with dr_grpo/rloo it is rarely hit."
    ),
)
def clip_cov_score(x: SelectionInputs) -> torch.Tensor:
    cov = advantage_logprob_covariance(_signed_advantage(x, "clip_cov"), x.logprob)
    in_band = (cov > CLIP_COV_LOW) & (cov < CLIP_COV_HIGH)
    return torch.where(in_band, cov, torch.zeros_like(cov))


@register_method(
    "lopti",
    "Lopti: low-probability tokens (p < 0.5), lowest probability first",
    citation="arXiv 2505.12929, Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs",
    details=(
        "score = eta - p with eta = 0.5: positive exactly for the tokens Lopti isolates (p < "
        "eta), which the paper updates in a first pass before the high-probability ones. The "
        "ranking equals surprisal's (-log p, the same paper), so the selections coincide; the "
        "score's sign tells the paper's split (its set has a variable size, here top k)."
    ),
)
def lopti_score(x: SelectionInputs) -> torch.Tensor:
    return LOPTI_ETA - x.logprob.double().exp()


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


@register_method(
    "gtpo",
    "GTPO: entropy-shaped token advantage |A|(1 + 0.1 H_norm) (a weighting, scored by weight)",
    citation="arXiv 2508.04349, GTPO and GRPO-S: Token and Sequence-Level Reward Shaping",
    kind="weighting",
    details=(
        "score = |A_i| (1 + beta H_norm_it), beta = alpha2 / alpha1 = 0.1 (the paper's "
        "alpha1 = 1, alpha2 = 0.1). H_norm_it = d_t H_it / sum_k H_kt over the group's "
        "successful answers (A > 0) at position t; for failed answers (A < 0) the same with "
        "1 / (H + 1e-8) (confident mistakes weigh more); 0 where A = 0. Choices: success is "
        "A > 0 (the paper splits by binary reward), and the shaped reward is scaled by the "
        "GRPO |A_i| instead of the paper's renormalization of shaped rewards into advantages; "
        "the score is the magnitude of the token's weight on d log pi."
    ),
)
def gtpo_score(x: SelectionInputs) -> torch.Tensor:
    a = _signed_advantage(x, "gtpo")
    share = gtpo_entropy_share(a, x.entropy, x.answer_index, x.group_index)
    return a.abs() * (1.0 + GTPO_BETA * share)


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
