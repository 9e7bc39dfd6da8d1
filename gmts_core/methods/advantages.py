"""Group-relative advantage estimators (a registry).

Each takes the rewards r of one group, shape (G,), and returns advantages A, shape (G,).
When every reward in a group is equal, every estimator returns zeros: the group carries no
learning signal.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gmts_core.bounds import MAX_ABS_REWARD
from gmts_core.errors import InvalidInputError
from gmts_core.registry import Registry

GRPO_EPS = 1e-4

AdvantageFn = Callable[[torch.Tensor], torch.Tensor]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")


@ADVANTAGES.register("grpo")
def grpo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = (r_i - mean r) / (std r + eps), sample std (unbiased, as TRL), eps = 1e-4."""
    r = rewards.double()
    if r.numel() < 2:
        return torch.zeros_like(rewards, dtype=torch.float64)
    return (r - r.mean()) / (r.std(unbiased=True) + GRPO_EPS)


@ADVANTAGES.register("dr_grpo")
def dr_grpo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = r_i - mean r (Dr. GRPO: no std normalization)."""
    r = rewards.double()
    return r - r.mean()


@ADVANTAGES.register("rloo")
def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = r_i - mean_{j != i} r_j (leave-one-out baseline); 0 for a group of one."""
    r = rewards.double()
    g = r.numel()
    if g < 2:
        return torch.zeros_like(r)
    return r - (r.sum() - r) / (g - 1)


def compute_advantages(rewards: torch.Tensor, mode: str = "grpo") -> torch.Tensor:
    """Advantages of one group with the estimator ``mode`` (float64, shape (G,)).

    A group whose rewards are all equal gets exact zeros: r - mean(r) is not exactly 0 in
    floating point for rewards like 0.1, and that rounding noise must not pass for a signal.
    Rewards must be finite and within +-MAX_ABS_REWARD (gmts_core.bounds), so every estimator
    stays finite (InvalidInputError otherwise).
    """
    fn = ADVANTAGES.get(mode)
    r = rewards.double()
    if not bool(torch.isfinite(r).all()) or bool((r.abs() > MAX_ABS_REWARD).any()):
        raise InvalidInputError(
            f"rewards must be finite and within +-{MAX_ABS_REWARD:g} to compute advantages"
        )
    if r.numel() == 0 or bool((r == r[0]).all()):
        return torch.zeros_like(r)
    advantages = fn(r)
    if not bool(torch.isfinite(advantages).all()):
        raise InvalidInputError(f"the {mode} advantages of rewards {r.tolist()} are not finite")
    return advantages


def list_advantages() -> list[str]:
    return ADVANTAGES.names()
