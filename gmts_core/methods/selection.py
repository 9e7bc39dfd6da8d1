"""Token selection methods (a registry) and top-k selection with ranks.

A method maps the per-token quantities of a batch to one score per token; selection keeps the
top k = ceil(ratio * N) tokens of each scope (the whole batch, one group, or one answer).
Ties are broken by flat order, which is (group, answer, position). Adding a method is one
small function decorated with ``@register_method``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gmts_core.registry import Registry

SCOPES = ("batch", "group", "answer")


@dataclass
class SelectionInputs:
    """Flat per-token quantities of a batch, all shape (N,), ordered by (group, answer, pos)."""

    entropy: torch.Tensor  # nats
    logprob: torch.Tensor  # log pi_y
    grad_norm: torch.Tensor  # || d log pi_y / d z ||
    grad_proxy: torch.Tensor  # w_i |omega_t| grad_norm (|A_i| w_i grad_norm on-policy, beta 0)
    signal_scale: torch.Tensor  # w_i |omega_t| (gmts_core.methods.coefficient); |A_i| w_i on-policy
    answer_index: torch.Tensor  # int64, global answer index
    group_index: torch.Tensor  # int64
    seed: int = 0
    # Signed A_i of the token's answer, (N,): the literature methods that need the sign
    # (Clip-Cov / KL-Cov covariance, GTPO's success/failure split) raise without it.
    advantage: torch.Tensor | None = None
    # the effective coefficient (gmts_core.methods.coefficient); None: on-policy, no KL term
    ratio: torch.Tensor | None = None  # pi_theta / pi_old
    clipped: torch.Tensor | None = None  # bool, the clipped objective is flat here
    coef: torch.Tensor | None = None  # omega_t
    paper_coef: torch.Tensor | None = None  # r I A^ + beta (pi_ref / pi_theta - 1)

    @property
    def num_tokens(self) -> int:
        return int(self.entropy.numel())


@dataclass(frozen=True)
class SelectionMethod:
    name: str
    score: Callable[[SelectionInputs], torch.Tensor]
    description: str  # one line, shown next to the name in listings and pickers
    uses_ratio: bool = True  # False: the method keeps every token (plain GRPO)
    citation: str = ""  # the paper the criterion comes from (arXiv id and title)
    details: str = ""  # formula, constants and the choices the paper leaves open
    kind: str = "selection"  # "selection", or "weighting": tokens scored by their weight
    default_scope: str = "batch"  # the scope front ends use when this method is chosen alone


METHODS: Registry[SelectionMethod] = Registry("selection method")


def register_method(
    name: str,
    description: str,
    uses_ratio: bool = True,
    citation: str = "",
    details: str = "",
    kind: str = "selection",
    default_scope: str = "batch",
) -> Callable[
    [Callable[[SelectionInputs], torch.Tensor]], Callable[[SelectionInputs], torch.Tensor]
]:
    """Register a scoring function as selection method ``name`` (decorator)."""

    def wrap(
        fn: Callable[[SelectionInputs], torch.Tensor],
    ) -> Callable[[SelectionInputs], torch.Tensor]:
        spec = SelectionMethod(
            name, fn, description, uses_ratio, citation, details, kind, default_scope
        )
        METHODS.register(name)(spec)
        return fn

    return wrap


def list_methods() -> list[str]:
    return METHODS.names()


def default_scope(methods: list[str] | tuple[str, ...]) -> str:
    """The scope for a choice of methods: a lone method's own default (``gmts_paper``: group,
    as in the paper), else ``batch``."""
    return METHODS.get(methods[0]).default_scope if len(methods) == 1 else "batch"


@register_method("entropy", "Shannon entropy H (the 80/20 rule; TRL top_entropy_quantile)")
def entropy_score(x: SelectionInputs) -> torch.Tensor:
    return x.entropy


@register_method(
    "gmts", "GMTS: exact logit-gradient norm w |omega| g of the GRPO loss (|A| w g on-policy)"
)
def gmts_score(x: SelectionInputs) -> torch.Tensor:
    return x.grad_proxy


@register_method("gmts_entropy", "GMTS entropy approximation w |omega| H (|A| w H on-policy)")
def gmts_entropy_score(x: SelectionInputs) -> torch.Tensor:
    return x.signal_scale * x.entropy


@register_method(
    "gmts_paper",
    "the GMTS paper's score H |r I A^ + beta pi_ref/pi_theta - beta|, top 20% per group",
    default_scope="group",
)
def gmts_paper_score(x: SelectionInputs) -> torch.Tensor:
    """delta_t = H_t |r_t I_t A^_i + beta pi_ref / pi_theta - beta| (gmts_core.methods.coefficient).

    Without ``paper_coef`` the inputs are on-policy with no KL term, where |A^_i| = |A_i| w_i N
    = signal_scale * N.
    """
    if x.paper_coef is None:
        return x.entropy * x.signal_scale * x.num_tokens
    return x.entropy * x.paper_coef.abs()


@register_method("surprisal", "surprisal -log p: low-probability tokens carry large gradients")
def surprisal_score(x: SelectionInputs) -> torch.Tensor:
    return -x.logprob


@register_method("random", "seeded uniform random scores (a control)")
def random_score(x: SelectionInputs) -> torch.Tensor:
    gen = torch.Generator().manual_seed(x.seed)
    return torch.rand(x.num_tokens, generator=gen, dtype=torch.float64).to(x.entropy.device)


@register_method("all", "every token (plain GRPO)", uses_ratio=False)
def all_score(x: SelectionInputs) -> torch.Tensor:
    return torch.ones_like(x.entropy)


def top_k_count(ratio: float, n: int) -> int:
    """k = ceil(ratio * n), robust to float noise (0.7 * 10 is 7, not 8)."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return min(n, math.ceil(round(ratio * n, 9)))


@dataclass
class Selection:
    """Result of one method: scores, ranks within the scope (1 = highest), selected flags."""

    method: str
    scores: torch.Tensor  # (N,) float
    ranks: torch.Tensor  # (N,) int64, 1-based within the token's scope
    selected: torch.Tensor  # (N,) bool


def rank_and_select(
    scores: torch.Tensor, scope_ids: torch.Tensor, ratio: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ranks (1 = highest score) and top-k flags within each scope; ties by flat order."""
    n = scores.numel()
    ranks = torch.zeros(n, dtype=torch.long)
    selected = torch.zeros(n, dtype=torch.bool)
    clean = torch.nan_to_num(scores.detach().double().cpu(), nan=-math.inf)
    scope_cpu = scope_ids.cpu()
    for scope in torch.unique(scope_cpu):
        idx = (scope_cpu == scope).nonzero().squeeze(-1)  # (n_s,) ascending flat order
        order = torch.sort(clean[idx], descending=True, stable=True).indices
        ranks[idx[order]] = torch.arange(1, idx.numel() + 1)
        selected[idx[order[: top_k_count(ratio, idx.numel())]]] = True
    return ranks, selected


def scope_ids_for(x: SelectionInputs, scope: str) -> torch.Tensor:
    """The id of each token's scope: one for the batch, its group, or its answer."""
    if scope == "batch":
        return torch.zeros_like(x.answer_index)
    if scope == "group":
        return x.group_index
    if scope == "answer":
        return x.answer_index
    raise ValueError(f"unknown scope {scope!r}; valid: {', '.join(SCOPES)}")


def selection_budget(x: SelectionInputs, ratio: float, scope: str) -> int:
    """k: how many tokens a ratio-based method selects in total (ceil(ratio * n) per scope)."""
    counts = torch.bincount(scope_ids_for(x, scope).cpu())
    return sum(top_k_count(ratio, int(n)) for n in counts if n > 0)


def select(x: SelectionInputs, method: str, ratio: float, scope: str = "batch") -> Selection:
    """Score every token with ``method`` and keep the top ceil(ratio * N) of each scope."""
    spec = METHODS.get(method)
    scores = spec.score(x)
    ranks, selected = rank_and_select(
        scores, scope_ids_for(x, scope), ratio if spec.uses_ratio else 1.0
    )
    return Selection(method, scores, ranks, selected)
