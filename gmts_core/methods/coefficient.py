"""The exact effective coefficient of a token in the clipped GRPO loss with a KL term.

For answer i and token t, with the policy's log-probability logp_t (temperature tau), the
sampling policy's old_t and the reference's ref_t, the loss of :mod:`gmts_core.grpo.loss`
(TRL's too) is  w_i [m_t pg_t + beta kl_t]  with

    r_t   = exp(logp_t - old_t)                                   the ratio pi_theta / pi_old
    pg_t  = -min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i)
    kl_t  = exp(ref_t - logp_t) - (ref_t - logp_t) - 1             (k3)

Its derivative with respect to logp_t is -w_i omega_t with

    omega_t = m_t r_t I_t A_i + beta (pi_ref / pi_theta - 1)

where I_t = 0 where the clipped objective is flat (r > 1 + eps_high with A > 0, or r < 1 -
eps_low with A < 0; with TRL's two-sided ``delta`` or verl's dual clip ``clip_ratio_c``, also r
> delta with A < 0) and 1 elsewhere. As d logp_t / d z = (e_y - pi) / tau has norm g, the exact
norm of the loss gradient at the token's logits is w_i |omega_t| g (``grad_proxy``). ``coef``
below is omega_t with m_t = 1: the token's multiplier if it is trained; a token left out of the
selection keeps only the KL part. (With TRL's ``use_bias_correction_kl`` the KL term is r_t kl_t
and its part of omega_t is beta r_t log(pi_ref / pi_theta) instead.) At the on-policy point (r =
1) with beta = 0, omega_t = A_i and the norm is |A_i| w_i g.

The GMTS paper's released code scores with the same coefficient: Framework1 divides all of it
(advantage and KL part) by G |o_i|, Framework2 (verl) takes it raw; both multiply by the
entropy (:mod:`gmts_core.methods.gmts_released`). ``kl`` below is the KL part on its own.
The released code's indicator (I_trust) has the PPO clip only, never the dual clip, so a token
with A < 0 and r > delta keeps its score r A there (``ppo_clipped``), while the loss's own
omega_t (``coef``, which ``gmts`` ranks by) is 0 for it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from gmts_core.methods.selection import SelectionInputs
from gmts_core.stats.metrics import grad_proxy


@dataclass(frozen=True)
class ClipSettings:
    """The loss's clipping range and KL weight (as in :class:`gmts_core.grpo.step.RLConfig`)."""

    epsilon_low: float = 0.2
    epsilon_high: float = 0.28
    beta: float = 0.0
    delta: float | None = None  # TRL's two-sided clip of r for A < 0 (None: off)
    # TRL's use_bias_correction_kl: the KL term is r_t kl_t, whose derivative with respect to
    # logp_t is beta r_t (logp_t - ref_t), so its part of omega_t is beta r_t log(pi_ref / pi)
    bias_corrected_kl: bool = False


@dataclass
class EffectiveCoefficient:
    """Per-token ratio, clip flag and coefficients, each (N,) float64 (``clipped`` bool)."""

    ratio: torch.Tensor  # r_t = pi_theta / pi_old
    clipped: torch.Tensor  # I_t = 0: the clipped objective is flat at this token
    coef: torch.Tensor  # omega_t = r I A + beta (pi_ref / pi_theta - 1)
    kl: torch.Tensor  # the KL part of omega_t: beta (pi_ref / pi_theta - 1), 0 without KL
    # I_t = 0 by the PPO clip alone, without the dual clip ``delta``: the released GMTS code's
    # I_trust (both frameworks), which the paper's methods score with; None: no dual clip, so
    # ``clipped`` is that already
    ppo_clipped: torch.Tensor | None = None


def clip_flat(ratio: torch.Tensor, advantage: torch.Tensor, settings: ClipSettings) -> torch.Tensor:
    """I_t = 0 (True here) where -min(r A, clip(r) A) does not depend on r."""
    flat = ((ratio > 1.0 + settings.epsilon_high) & (advantage > 0)) | (
        (ratio < 1.0 - settings.epsilon_low) & (advantage < 0)
    )
    if settings.delta is not None:
        flat |= (ratio > settings.delta) & (advantage < 0)
    return flat


def effective_coefficient(
    advantage: torch.Tensor,
    weight: torch.Tensor,
    settings: ClipSettings = ClipSettings(),
    logp: torch.Tensor | None = None,
    old_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
) -> EffectiveCoefficient:
    """omega_t of the module docstring for N tokens; every tensor is per token, (N,).

    ``old_logp`` None means on-policy (r = 1); ``ref_logp`` None (or beta 0) means no KL term.
    ``weight`` is w_i (unused here; kept so callers pass the loss's terms together).
    """
    adv = advantage.double()
    if logp is None or old_logp is None:
        ratio = torch.ones_like(adv)
    else:
        ratio = torch.exp(logp.double() - old_logp.double())
    flat = clip_flat(ratio, adv, settings)
    ppo_flat = None if settings.delta is None else clip_flat(ratio, adv, _no_dual_clip(settings))
    active = ratio * (~flat).double()  # r_t I_t
    kl = torch.zeros_like(adv)
    if settings.beta != 0.0 and ref_logp is not None:
        if logp is None:
            raise ValueError("the KL term's coefficient needs the policy's log-probs")
        log_rho = ref_logp.double() - logp.double()  # log(pi_ref / pi_theta)
        if settings.bias_corrected_kl:
            kl = settings.beta * ratio * log_rho
        else:
            kl = settings.beta * torch.expm1(log_rho)  # beta (rho - 1)
    return EffectiveCoefficient(
        ratio=ratio, clipped=flat, coef=active * adv + kl, kl=kl, ppo_clipped=ppo_flat
    )


def _no_dual_clip(settings: ClipSettings) -> ClipSettings:
    return dataclasses.replace(settings, delta=None)


def selection_inputs(
    entropy: torch.Tensor,
    logprob: torch.Tensor,
    grad_norm: torch.Tensor,
    weight: torch.Tensor,
    answer_index: torch.Tensor,
    group_index: torch.Tensor,
    coefficient: EffectiveCoefficient,
    seed: int = 0,
    advantage: torch.Tensor | None = None,
    reward: torch.Tensor | None = None,
) -> SelectionInputs:
    """Selection inputs with gamma = w_i |omega_t| g; every tensor per token (N,), float64.
    ``advantage``: the signed A_i of each token's answer (the literature methods that need the
    sign, e.g. Clip-Cov's covariance, read it); ``reward``: r_i of each token's answer (the
    paper's methods standardise it as their code does)."""
    scale = weight.double() * coefficient.coef.abs()  # w_i |omega_t|
    return SelectionInputs(
        entropy=entropy.double(),
        logprob=logprob.double(),
        grad_norm=grad_norm.double(),
        grad_proxy=grad_proxy(coefficient.coef, weight.double(), grad_norm.double()),
        signal_scale=scale,
        answer_index=answer_index,
        group_index=group_index,
        seed=seed,
        advantage=None if advantage is None else advantage.double(),
        ratio=coefficient.ratio,
        clipped=coefficient.clipped,
        paper_clipped=coefficient.ppo_clipped,
        coef=coefficient.coef,
        kl_coef=coefficient.kl,
        reward=None if reward is None else reward.double(),
    )
