"""The GMTS paper's token selection, as its two released code bases run it.

The public repository ``outongyiLv/GMTS`` holds two implementations, and they differ:

- **Framework1** (``GMTS-Framework1/grpo_tools/grpo.py``, functions ``GMTS()``,
  ``normalize_rewards_per_group()`` and ``update_policy()``; recipe
  ``example/Qwen2.5-math-1.5b-grpo-GMTS.yaml``: ``method: grpo``, ``selected_percent: 0.8``,
  ``kl_beta: 0.001``, one mini-batch per step). Per token of answer i in a group of G answers:

      A_i     = (r_i - mean r) / (std r + 1e-6)            population std (numpy ``np.std``)
      delta_t = H_t |r_t I_t A_i + beta (pi_ref / pi_theta - 1)| / (G |o_i|)

  H at temperature 1 (its sampler's temperature too); the KL part is divided by G |o_i| like
  the advantage. In each group it sorts the scores ascending, stably (Python ``list.sort``),
  and removes the first ``max(1, ceil(selected_percent * N_g))``: the share *removed* is
  ``selected_percent``, so floor(0.2 N_g) tokens stay (200 of 1001), and at a tie on the
  boundary the later (answer, position) tokens stay. Once per step, on the whole batch.

- **Framework2** (``GMTS-Framework2/verl/workers/actor/dp_actor.py``,
  ``DataParallelPPOActor.update_policy()``; script
  ``examples/dapo_trainer/run_qwen3_8b_qwa.sh``: ``doing_entropy_clipping_percent=0.8``,
  ``loss_agg_mode=token-mean``, ``use_kl_loss=False``). The score is
  H_t |r_t I_t A_i + beta (pi_ref / pi_theta - 1)| with verl's advantage (unbiased std, eps
  1e-6), no length normalisation, H at the rollout temperature. Per group it sorts the
  non-zero scores ascending and keeps the tokens whose score is strictly above the
  int(p n_nonzero)-th smallest (0-based index int(p n_nonzero) - 1, p = 0.8 the share
  removed; every non-zero token when int(p n_nonzero) = 0): score-0 tokens are never kept and
  every token tied at the threshold is dropped. It re-selects on every PPO mini-batch at the
  current policy.

This module holds those rules as pure tensor functions; :mod:`gmts_core.methods.selection`
registers them as the methods ``gmts_paper`` (Framework1) and ``gmts_paper_verl``
(Framework2). Our ``ratio`` is the share *kept*; the share the released code removes is its
config's literal number, the decimal complement of ``ratio`` (:func:`removed_share`: ratio 0.7 is
``selected_percent: 0.3``, the float 0.3, not 1.0 - 0.7 = 0.30000000000000004), and the counts
use that code's own float arithmetic: ``ceil(N * p)`` in Framework1, ``int(n * p)`` in
Framework2.

A zero-length answer counts in its group as in Framework1 (its G and its reward mean and std)
when the caller lists every answer (``answer_group`` / ``answer_reward``, per answer); the
tokens alone cannot show an answer that has none.
"""

from __future__ import annotations

import math
from decimal import Decimal

import torch

FRAMEWORK1_STD_EPS = 1e-6  # normalize_rewards_per_group: (r - mean) / (np.std + 1e-6)
VERL_STD_EPS = 1e-6  # verl compute_grpo_outcome_advantage: epsilon=1e-6, torch.std (unbiased)
FRAMEWORK1_KL_BETA = 0.001  # update_policy(kl_beta=0.001), the recipe's kl_beta


def _per_answer(
    values: torch.Tensor, answer_index: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(each answer's value, read at its first token; each token's answer slot)."""
    _, slot = torch.unique(answer_index, return_inverse=True)
    n_answers = int(slot.max()) + 1 if slot.numel() else 0
    position = torch.arange(slot.numel())
    first = torch.full((n_answers,), slot.numel(), dtype=torch.long)
    first = first.scatter_reduce(0, slot, position, reduce="amin")
    return values[first], slot


def _answer_table(
    values: torch.Tensor,
    answer_index: torch.Tensor,
    table: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a value per answer, each token's row in it): ``table`` (A,) indexed by answer_index when
    the caller lists every answer (zero-length ones included), else read from the tokens."""
    if table is None:
        return _per_answer(values.cpu(), answer_index.cpu())
    return table.cpu(), answer_index.cpu().long()


def group_standardised_advantages(
    reward: torch.Tensor,
    answer_index: torch.Tensor,
    group_index: torch.Tensor,
    unbiased: bool,
    eps: float,
    answer_reward: torch.Tensor | None = None,
    answer_group: torch.Tensor | None = None,
) -> torch.Tensor:
    """A_i = (r_i - mean r) / (std r + eps) over each group's answers, one value per token (N,).

    ``reward``: each token's answer reward (N,). ``unbiased`` picks the sample std (verl,
    ``torch.std``) or the population std (Framework1, ``np.std``). ``answer_reward`` and
    ``answer_group`` (A,), indexed by ``answer_index``: every answer of the batch, zero-length
    ones included, which then count in their group's mean and std as in Framework1 (None: the
    answers with tokens). A group whose rewards are all equal gets exact zeros (as
    :func:`gmts_core.methods.advantages.compute_advantages`: rounding noise in r - mean r is not
    a signal). A group of one answer: with the unbiased std (verl), mean 0 and std 1, as verl's
    ``compute_grpo_outcome_advantage`` sets them, so A = r / (1 + eps) and its tokens train;
    with the population std (Framework1) std 0, so A = (r - r) / eps = 0.
    """
    if (answer_reward is None) != (answer_group is None):
        raise ValueError("answer_reward and answer_group come together")
    r_answer, slot = _answer_table(reward.double(), answer_index, answer_reward)
    r_answer = r_answer.double()
    g_answer, _ = _answer_table(group_index, answer_index, answer_group)
    adv = torch.zeros_like(r_answer)
    for g in torch.unique(g_answer):
        idx = (g_answer == g).nonzero().squeeze(-1)
        rg = r_answer[idx]
        if rg.numel() == 1 and unbiased:
            adv[idx] = (rg - 0.0) / (1.0 + eps)  # verl: id2mean 0, id2std 1 for one answer
            continue
        if rg.numel() < 2 or bool((rg == rg[0]).all()):
            continue
        adv[idx] = (rg - rg.mean()) / (rg.std(unbiased=unbiased) + eps)
    return adv[slot]


def answers_per_group(
    answer_index: torch.Tensor,
    group_index: torch.Tensor,
    answer_group: torch.Tensor | None = None,
) -> torch.Tensor:
    """G of each token's group, (N,) float64: the answers in it, zero-length ones included when
    ``answer_group`` (A,) lists every answer's group (else the answers with tokens)."""
    g_answer, _ = _answer_table(group_index, answer_index, answer_group)
    groups, g_slot = torch.unique(group_index.cpu(), return_inverse=True)
    present = torch.isin(g_answer, groups)  # answers of groups with tokens in this batch
    counts = torch.zeros(groups.numel(), dtype=torch.float64)
    ones = torch.ones(int(present.sum()), dtype=torch.float64)
    counts.index_add_(0, torch.searchsorted(groups, g_answer[present]), ones)
    return counts[g_slot]


def answer_lengths(answer_index: torch.Tensor) -> torch.Tensor:
    """|o_i| of each token's answer, (N,) float64."""
    _, slot, counts = torch.unique(answer_index.cpu(), return_inverse=True, return_counts=True)
    return counts.double()[slot]


def paper_score(
    entropy: torch.Tensor,
    advantage: torch.Tensor,
    ratio: torch.Tensor | None,
    clipped: torch.Tensor | None,
    kl_coef: torch.Tensor | None,
    length_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """H_t |r_t I_t A_i + kl_t| / s_i, every tensor (N,), float64.

    ``kl_coef``: beta (pi_ref / pi_theta - 1) (None: no KL term); ``ratio``/``clipped`` None:
    on-policy (r = 1, I = 1); ``length_scale`` s_i: G |o_i| for Framework1, None (1) for
    Framework2.
    """
    a = advantage.double()
    active = torch.ones_like(a) if ratio is None else ratio.double()
    if clipped is not None:
        active = active * (~clipped.bool()).double()
    coef = active * a + (0.0 if kl_coef is None else kl_coef.double())
    score = entropy.double() * coef.abs()
    return score if length_scale is None else score / length_scale.double()


def removed_share(ratio: float) -> float:
    """The share of a group the released code removes for our kept share ``ratio``, as its
    config writes it: the decimal complement of ratio's shortest decimal form (0.7 -> 0.3,
    0.2 -> 0.8), so ``selected_percent: 0.3`` is the float 0.3 and not 1.0 - 0.7 =
    0.30000000000000004 (which removes one token more of 10)."""
    return float(Decimal(1) - Decimal(repr(float(ratio))))


def framework1_removed(n: int, ratio: float) -> int:
    """How many of a group's n tokens Framework1 removes: ``max(1, math.ceil(len(entries) *
    frac))`` with frac = :func:`removed_share` (ratio), a plain float product as GMTS() has it."""
    return max(1, math.ceil(n * removed_share(ratio)))


def framework1_kept(n: int, ratio: float) -> int:
    """Tokens kept of n: n - removed, and at least 1 (Framework1 keeps none where it removes
    them all, e.g. a group of fewer than 5 tokens at ratio 0.2; a group of 16 answers has
    more)."""
    return max(1, n - framework1_removed(n, ratio)) if n > 0 else 0


def framework2_removed(n_nonzero: int, ratio: float) -> int:
    """Framework2's ``num_to_remove = int(len(non_zero) * doing_entropy_clipping_percent)`` with
    the percent = :func:`removed_share` (ratio), a plain float product truncated by ``int``."""
    return int(n_nonzero * removed_share(ratio))


def _clean(scores: torch.Tensor) -> torch.Tensor:
    return torch.nan_to_num(scores.detach().double().cpu(), nan=-math.inf)


def framework1_keep(
    scores: torch.Tensor, scope_ids: torch.Tensor, ratio: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ranks (1 = highest) and kept flags, Framework1's rule in each scope: a stable ascending
    sort in flat (answer, position) order, the first ``framework1_removed`` dropped, so at a tie
    the later tokens rank higher and stay."""
    n = scores.numel()
    ranks = torch.zeros(n, dtype=torch.long)
    selected = torch.zeros(n, dtype=torch.bool)
    clean, scope_cpu = _clean(scores), scope_ids.cpu()
    for scope in torch.unique(scope_cpu):
        idx = (scope_cpu == scope).nonzero().squeeze(-1)  # (n_s,) ascending flat order
        up = torch.sort(clean[idx], stable=True).indices  # ascending, ties in flat order
        m = idx.numel()
        ranks[idx[up]] = torch.arange(m, 0, -1)  # the last in ascending order ranks 1
        selected[idx[up[m - framework1_kept(m, ratio) :]]] = True
    return ranks, selected


def framework2_keep(
    scores: torch.Tensor, scope_ids: torch.Tensor, ratio: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ranks (1 = highest, ties by flat order) and kept flags, Framework2's rule in each scope:
    with p = :func:`removed_share` (ratio) and the n non-zero scores sorted ascending, the
    threshold is the int(n p)-th smallest (0 when int(n p) = 0) and a token is kept when its
    score is strictly above it (score 0 never; ties at the threshold dropped)."""
    n = scores.numel()
    ranks = torch.zeros(n, dtype=torch.long)
    selected = torch.zeros(n, dtype=torch.bool)
    clean, scope_cpu = _clean(scores), scope_ids.cpu()
    for scope in torch.unique(scope_cpu):
        idx = (scope_cpu == scope).nonzero().squeeze(-1)
        s = clean[idx]
        order = torch.sort(s, descending=True, stable=True).indices
        ranks[idx[order]] = torch.arange(1, idx.numel() + 1)
        nonzero = torch.sort(s[(s != 0) & torch.isfinite(s)]).values
        num_to_remove = framework2_removed(nonzero.numel(), ratio)
        threshold = 0.0 if num_to_remove == 0 else float(nonzero[num_to_remove - 1])
        selected[idx] = s > threshold
    return ranks, selected
