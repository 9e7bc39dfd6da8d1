"""Summaries that teach: gradient coverage, overlaps, entropy/gradient rank correlation,
wasted selection budget, and each group's share of the budget.
"""

from __future__ import annotations

import math
from itertools import combinations
from statistics import median

import numpy as np
import torch

from gmts_core.selection import Selection


def gradient_coverage(grad_proxy: torch.Tensor, selected: torch.Tensor) -> float:
    """Share of the logit-gradient mass sum(gamma) that the selection keeps (1.0 if none)."""
    total = float(grad_proxy.double().sum())
    if total <= 0.0:
        return 1.0 if bool(selected.all()) else 0.0
    return float(grad_proxy.double()[selected].sum()) / total


def overlap(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Overlap of two selections: intersection count and Jaccard index."""
    inter = int((a & b).sum())
    union = int((a | b).sum())
    return {"count": inter, "jaccard": inter / union if union else 1.0}


def pairwise_overlap(selections: dict[str, Selection]) -> dict[str, dict[str, float]]:
    """Overlap of every pair of methods, keyed ``"a|b"`` in the order the methods were given."""
    return {
        f"{a}|{b}": overlap(selections[a].selected, selections[b].selected)
        for a, b in combinations(selections, 2)
    }


def _ranks(v: np.ndarray) -> np.ndarray:
    """1-based average ranks of a 1-D float64 array (ties share their average rank)."""
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    last = np.cumsum(counts).astype(np.float64)  # the last rank taken by each distinct value
    return (last - (counts - 1) / 2.0)[inverse.reshape(-1)]


def average_ranks(v: torch.Tensor) -> torch.Tensor:
    """1-based ranks of the values of ``v`` (1-D), ties sharing their average rank (float64),
    as ``scipy.stats.rankdata(v, "average")``."""
    return torch.from_numpy(_ranks(v.detach().double().cpu().numpy().ravel()))


def _spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 2 or np.isnan(x).any() or np.isnan(y).any():
        return None
    if (x == x[0]).all() or (y == y[0]).all():
        return None
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    rho = float((rx * ry).sum() / math.sqrt(float((rx * rx).sum() * (ry * ry).sum())))
    return None if math.isnan(rho) else max(-1.0, min(1.0, rho))


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy().ravel()


def spearman(x: torch.Tensor, y: torch.Tensor) -> float | None:
    """Spearman rank correlation, or None where it is undefined (n < 2 or a constant input).

    The Pearson correlation of the average ranks, as ``scipy.stats.spearmanr`` (the tests check
    it against scipy); computed here in numpy because an analysis asks for it twice per answer
    and per-call overhead (scipy's ~2 ms, torch's ~0.3 ms) dominated short answers.
    """
    return _spearman(_numpy(x), _numpy(y))


def spearman_by_answer(
    x: torch.Tensor, y: torch.Tensor, answer_index: torch.Tensor
) -> dict[str, float | None]:
    """Spearman of x and y over all tokens, and the median of the per-answer correlations."""
    xs, ys, idx = _numpy(x), _numpy(y), answer_index.detach().cpu().numpy().ravel()
    order = np.argsort(idx, kind="stable")  # answers' tokens contiguous, in token order
    xo, yo, io = xs[order], ys[order], idx[order]
    bounds = np.flatnonzero(np.diff(io)) + 1
    within = [
        rho
        for sx, sy in zip(np.split(xo, bounds), np.split(yo, bounds), strict=True)
        if (rho := _spearman(sx, sy)) is not None
    ]
    return {"batch": _spearman(xs, ys), "within_answer_median": median(within) if within else None}


def wasted_share(grad_proxy: torch.Tensor, selected: torch.Tensor) -> float:
    """Share of selected tokens whose gradient proxy is exactly 0 (they cannot move the model)."""
    n = int(selected.sum())
    return int(((grad_proxy == 0) & selected).sum()) / n if n else 0.0


def budget_share(selected: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> list[float]:
    """Share of the method's selected tokens that falls in each group."""
    n = int(selected.sum())
    counts = torch.bincount(group_index[selected], minlength=num_groups)
    return [int(c) / n if n else 0.0 for c in counts]
