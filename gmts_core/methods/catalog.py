"""The listing of every selection method: name, one-line description, citation, details.

One source for ``GET /v1/methods``, ``gmts methods`` and the UI's method pickers. The core
methods' citations live here (their registrations predate the citation field); the
literature methods carry theirs (:mod:`gmts_core.methods.other_papers`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gmts_core.methods.selection import METHODS, list_methods

_CORE: dict[str, tuple[str, str]] = {
    "entropy": (
        "arXiv 2506.01939, Beyond the 80/20 Rule: High-Entropy Minority Tokens",
        "score = H = -sum_v pi_v log pi_v (nats); TRL top_entropy_quantile",
    ),
    "gmts": (
        "arXiv 2608.30632, GMTS (EMNLP 2026 Findings)",
        "score = |A_i| w_i g, g = ||d log pi_y / dz|| = sqrt(1 - 2p + sum pi^2) / tau: the exact "
        "norm of the GRPO loss gradient at the token's logits",
    ),
    "gmts_entropy": (
        "arXiv 2608.30632, GMTS (EMNLP 2026 Findings)",
        "score = |A_i| w_i H: GMTS's entropy approximation of the gradient magnitude",
    ),
    "surprisal": (
        "arXiv 2505.12929, Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs",
        "score = -log p: low-probability tokens carry large gradients",
    ),
    "random": ("control", "score = seeded uniform random numbers"),
    "all": ("arXiv 2402.03300, DeepSeekMath (GRPO)", "every token: plain GRPO"),
}


@dataclass(frozen=True)
class MethodInfo:
    """What a listing shows about one selection method."""

    name: str
    description: str  # one line
    citation: str
    details: str  # formula, constants, choices the paper leaves open
    kind: str  # "selection" or "weighting" (scored by its weight)
    uses_ratio: bool


def method_info(name: str) -> MethodInfo:
    spec = METHODS.get(name)
    citation, details = _CORE.get(name, ("", ""))
    return MethodInfo(
        name=name,
        description=spec.description,
        citation=spec.citation or citation,
        details=spec.details or details,
        kind=spec.kind,
        uses_ratio=spec.uses_ratio,
    )


def method_catalog() -> list[MethodInfo]:
    """Every registered method, in registration order."""
    return [method_info(m) for m in list_methods()]
