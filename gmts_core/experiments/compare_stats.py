"""The final table's statistics of a compare, and the one sentence that states its conclusion.

Each method's final held-out accuracy, its gain over the start and its paired difference to the
reference method (same seeds, same problems) get percentile intervals from one paired bootstrap
over seeds and problems (:mod:`gmts_core.experiments.bootstrap`); :func:`conclusion` turns a
paired difference into a sentence whose verdict follows its interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gmts_core.experiments.bootstrap import (
    bootstrap_replicates,
    percentile_interval,
    seeds_to_separate,
    variance_components,
)

CONFIDENCE = 0.95  # of every interval in the final table


@dataclass(frozen=True)
class Interval:
    """A mean with its percentile interval."""

    mean: float
    ci_low: float
    ci_high: float

    def excludes_zero(self) -> bool:
        return self.ci_low > 0.0 or self.ci_high < 0.0

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high}


@dataclass(frozen=True)
class MethodStatistics:
    """One method's row: accuracy, gain over the start and paired difference to the reference."""

    method: str
    final_accuracy: Interval
    gain: Interval
    paired_difference: Interval | None  # None for the reference itself
    identical: bool  # the same score as the reference on every seed and problem
    seeds_to_separate: int | None  # see bootstrap.seeds_to_separate


@dataclass(frozen=True)
class CompareStatistics:
    methods: list[MethodStatistics]
    reference: str
    num_seeds: int
    num_problems: int
    per_problem: bool  # False: a file without per-problem results, seeds only

    def row(self, method: str) -> MethodStatistics:
        return next(m for m in self.methods if m.method == method)


def _interval(mean: float, replicates: NDArray[np.float64], low: float, high: float) -> Interval:
    lo, hi = percentile_interval(replicates, CONFIDENCE)
    clip = lambda v: float(min(max(v, low), high))  # noqa: E731 -- float rounding only
    return Interval(clip(mean), clip(lo), clip(hi))


def compare_statistics(
    methods: Sequence[str],
    finals: NDArray[np.float64],
    start: NDArray[np.float64],
    reference: str,
    per_problem: bool = True,
) -> CompareStatistics:
    """Intervals of every method from ``finals`` (M, S, P): per method, seed and problem, the
    final held-out accuracy, and ``start`` (P,): the start model's per-problem accuracy (one
    start for every seed). One set of bootstrap draws serves every method, so differences are
    paired."""
    m, s, p = finals.shape
    ref = finals[list(methods).index(reference)]  # (S, P)
    gains = finals - start[None, None, :]  # (M, S, P)
    diffs = finals - ref[None]  # (M, S, P)
    means = bootstrap_replicates(np.concatenate([finals, gains, diffs]))  # (3M, B)
    rows = []
    for i, name in enumerate(methods):
        is_ref = name == reference
        diff = _interval(float(diffs[i].mean()), means[2 * m + i], -1.0, 1.0)
        rows.append(
            MethodStatistics(
                method=name,
                final_accuracy=_interval(float(finals[i].mean()), means[i], 0.0, 1.0),
                gain=_interval(float(gains[i].mean()), means[m + i], -1.0, 1.0),
                paired_difference=None if is_ref else diff,
                identical=bool(np.array_equal(finals[i], ref)),
                seeds_to_separate=None
                if is_ref
                else seeds_to_separate(diff.mean, variance_components(diffs[i])),
            )
        )
    return CompareStatistics(rows, reference, s, p, per_problem)


def _points(x: float) -> str:
    """A difference of accuracies in percentage points, signed, with a true minus sign."""
    text = f"{100 * x:+.1f}"
    return "+0.0" if text == "-0.0" else text.replace("-", "\u2212")


def conclusion(stats: CompareStatistics, method: str) -> str:
    """One sentence: ``method`` minus the reference, its interval, and what it lets one say."""
    row = stats.row(method)
    d = row.paired_difference
    if d is None:
        raise ValueError(f"{method!r} is the reference method; it has no paired difference")
    head = f"{method} \u2212 {stats.reference}: {_points(d.mean)} points"
    head += f" [{_points(d.ci_low)}, {_points(d.ci_high)}]"
    seeds = f"{stats.num_seeds} seed{'s' if stats.num_seeds != 1 else ''}"
    size = f"{seeds} \u00d7 {stats.num_problems} problems"
    if not stats.per_problem:  # a few seeds' spread alone is far too narrow to call
        return (
            f"{head} over {seeds} only: this file has no per-problem scores, so the problems' "
            "noise is not counted and no verdict is given (a new `gmts compare` keeps them)."
        )
    if row.identical:
        return f"{head}: the same score on every seed and problem, nothing to separate."
    if d.excludes_zero():
        better = method if d.mean > 0 else stats.reference
        return (
            f"{head}, separable with {size} (the {CONFIDENCE:.0%} interval excludes 0): "
            f"{better} is better."
        )
    effect = f"{abs(100 * d.mean):.1f} points"
    if stats.num_seeds < 2:
        more = "; one seed cannot tell how many would separate it (no seed-to-seed variance)"
    elif row.seeds_to_separate is None:
        more = f"; no number of seeds would separate {effect} with {stats.num_problems} problems"
    else:
        more = (
            f"; about {row.seeds_to_separate} seeds would separate {effect} "
            "(from this run's seed and problem variance)"
        )
    return f"{head}, not separable with {size}{more}."


def conclusions(stats: CompareStatistics) -> list[str]:
    """A sentence per method against the reference, ``gmts`` first (the paper's question)."""
    others = [m.method for m in stats.methods if m.method != stats.reference]
    others.sort(key=lambda name: name != "gmts")
    return [conclusion(stats, name) for name in others]
