"""Summaries that teach: gradient coverage, overlaps, entropy/gradient rank correlation,
wasted selection budget, and each group's share of the budget; the batch's summary
(:func:`summarize`) and every group's (:func:`group_summaries`) built from them.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from itertools import combinations
from statistics import median
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gmts_core.methods.selection import Selection, SelectionInputs, selection_budget

if TYPE_CHECKING:
    from gmts_core.analysis.records import GroupRecord
    from gmts_core.config import AnalysisConfig


# SelectionInputs fields indexed by answer, not by token: kept whole in trained_only
_PER_ANSWER = ("answer_group", "answer_reward")


def trained_only(
    x: SelectionInputs, selections: dict[str, Selection]
) -> tuple[SelectionInputs, dict[str, Selection]]:
    """``x`` and ``selections`` restricted to the tokens the trainer's loss counted
    (``x.trained``): every summary is over those; untouched when every token was trained."""
    if x.all_trained:
        return x, selections
    assert x.trained is not None
    keep = x.trained
    changes: dict[str, Any] = {
        f.name: value[keep]
        for f in fields(x)
        if f.name not in (*_PER_ANSWER, "trained")
        and isinstance(value := getattr(x, f.name), torch.Tensor)
        and value.dim() == 1
        and value.numel() == keep.numel()
    }
    sub = replace(x, **changes, trained=None)
    return sub, {
        m: replace(s, scores=s.scores[keep], ranks=s.ranks[keep], selected=s.selected[keep])
        for m, s in selections.items()
    }


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


def _ranks_within(v: np.ndarray, group: np.ndarray) -> np.ndarray:
    """1-based average ranks of ``v`` within each group (ties share their average rank), for
    all groups at once: one sort by (group, value) instead of a sort per group."""
    n = v.size
    order = np.lexsort((v, group))
    vs, gs = v[order], group[order]
    new_group = np.r_[True, gs[1:] != gs[:-1]]
    start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    position = np.arange(n) - start + 1.0  # rank within the group, ties not yet averaged
    run = np.cumsum(new_group | np.r_[True, vs[1:] != vs[:-1]]) - 1  # runs of equal values
    average = np.bincount(run, weights=position) / np.bincount(run)
    ranks = np.empty(n)
    ranks[order] = average[run]
    return ranks


def spearman_within(
    x: torch.Tensor, y: torch.Tensor, answer_index: torch.Tensor
) -> dict[int, float | None]:
    """Spearman of x and y within each answer (None where undefined: fewer than 2 tokens, a
    NaN, or a constant input), computed for every answer at once; keys in increasing order."""
    xs, ys = _numpy(x), _numpy(y)
    ids, group = np.unique(answer_index.detach().cpu().numpy().ravel(), return_inverse=True)
    if ids.size == 0:
        return {}
    group = group.reshape(-1)
    count = np.bincount(group)
    bad = np.bincount(group, weights=np.isnan(xs) | np.isnan(ys)) > 0
    rx, ry = _ranks_within(xs, group), _ranks_within(ys, group)
    dx = rx - (np.bincount(group, weights=rx) / count)[group]
    dy = ry - (np.bincount(group, weights=ry) / count)[group]
    sxx, syy = np.bincount(group, weights=dx * dx), np.bincount(group, weights=dy * dy)
    sxy = np.bincount(group, weights=dx * dy)
    constant = _constant_within(xs, group) | _constant_within(ys, group)
    defined = (count >= 2) & ~bad & ~constant
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.clip(sxy / np.sqrt(sxx * syy), -1.0, 1.0)
    return {
        int(i): (float(r) if ok and not math.isnan(r) else None)
        for i, r, ok in zip(ids, rho, defined, strict=True)
    }


def _constant_within(v: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per group: are all its values equal?"""
    size = int(group.max()) + 1
    low, high = np.full(size, np.inf), np.full(size, -np.inf)
    with np.errstate(invalid="ignore"):  # a NaN makes its answer's correlation undefined anyway
        np.minimum.at(low, group, v)
        np.maximum.at(high, group, v)
    return low == high


def spearman_by_answer(
    x: torch.Tensor, y: torch.Tensor, answer_index: torch.Tensor
) -> dict[str, float | None]:
    """Spearman of x and y over all tokens, and the median of the per-answer correlations."""
    within = [r for r in spearman_within(x, y, answer_index).values() if r is not None]
    batch = _spearman(_numpy(x), _numpy(y))
    return {"batch": batch, "within_answer_median": median(within) if within else None}


def wasted_share(grad_proxy: torch.Tensor, selected: torch.Tensor) -> float:
    """Share of selected tokens whose gradient proxy is exactly 0 (they cannot move the model)."""
    n = int(selected.sum())
    return int(((grad_proxy == 0) & selected).sum()) / n if n else 0.0


def budget_share(selected: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> list[float]:
    """Share of the method's selected tokens that falls in each group."""
    n = int(selected.sum())
    counts = torch.bincount(group_index[selected], minlength=num_groups)
    return [int(c) / n if n else 0.0 for c in counts]


def group_summaries(
    x: SelectionInputs, selections: dict[str, Selection], records: list[GroupRecord]
) -> list[dict[str, Any]]:
    """Every group's summary (the batch summary's figures within the group), for all groups at
    once: one bincount per figure and one rank correlation per answer and per group, instead
    of a pass over the batch per group."""
    x, selections = trained_only(x, selections)
    n, gi = len(records), x.group_index
    proxy = x.grad_proxy.double()
    tokens = torch.bincount(gi, minlength=n).tolist()
    total = torch.bincount(gi, weights=proxy, minlength=n).tolist()
    count, kept = {}, {}
    for m, sel in selections.items():
        count[m] = torch.bincount(gi[sel.selected], minlength=n).tolist()
        kept[m] = torch.bincount(gi[sel.selected], weights=proxy[sel.selected], minlength=n)
    within = spearman_within(x.entropy, x.grad_proxy, x.answer_index)  # per answer
    per_group = spearman_within(x.entropy, x.grad_proxy, gi)
    out, first = [], 0
    for k, rec in enumerate(records):
        rhos = [within.get(a) for a in range(first, first + len(rec.answers))]
        first += len(rec.answers)
        defined = [r for r in rhos if r is not None]
        out.append(
            {
                "num_tokens": tokens[k],
                "zero_signal": all(ans.advantage == 0 for ans in rec.answers),
                "reward_mean": sum(ans.reward for ans in rec.answers) / max(len(rec.answers), 1),
                "selected_count": {m: count[m][k] for m in selections},
                "gradient_coverage": {  # as summaries.gradient_coverage, per group
                    m: float(kept[m][k]) / total[k]
                    if total[k] > 0
                    else (1.0 if count[m][k] == tokens[k] else 0.0)
                    for m in selections
                },
                "spearman_entropy_grad": {
                    "batch": per_group.get(k),
                    "within_answer_median": median(defined) if defined else None,
                },
            }
        )
    return out


def summarize(
    x: SelectionInputs, selections: dict[str, Selection], num_groups: int, config: AnalysisConfig
) -> dict[str, Any]:
    """The batch summary: coverage, overlaps, Spearman correlations and wasted shares, over the
    tokens the trainer's loss counted (``x.trained``; ``num_untrained_tokens`` the others)."""
    k = selection_budget(x, config.ratio, config.scope)
    untrained = 0 if x.trained is None else int((~x.trained).sum())
    x, selections = trained_only(x, selections)
    group_zero = [
        bool((x.signal_scale[x.group_index == gi] == 0).all()) for gi in range(num_groups)
    ]
    return {
        "num_tokens": x.num_tokens,
        "num_untrained_tokens": untrained,
        "num_answers": int(x.answer_index.max()) + 1 if x.num_tokens else 0,
        "num_groups": num_groups,
        "ratio": config.ratio,
        "scope": config.scope,
        "k": k,
        "zero_signal": all(group_zero),
        "num_zero_signal_groups": sum(group_zero),
        "selected_count": {m: int(s.selected.sum()) for m, s in selections.items()},
        "gradient_coverage": {
            m: gradient_coverage(x.grad_proxy, s.selected) for m, s in selections.items()
        },
        "wasted_share": {m: wasted_share(x.grad_proxy, s.selected) for m, s in selections.items()},
        "budget_share": {
            m: budget_share(s.selected, x.group_index, num_groups) for m, s in selections.items()
        },
        "overlap": pairwise_overlap(selections),
        "spearman_entropy_grad": spearman_by_answer(x.entropy, x.grad_proxy, x.answer_index),
    }
