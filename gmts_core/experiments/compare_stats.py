"""The final table's statistics of a compare, and the sentences that state its conclusion.

Each method's final held-out accuracy, its gain over the start and its paired difference to the
reference method (same seeds, same problems) get t intervals over seeds and problems
(:mod:`gmts_core.experiments.intervals`); :func:`conclusion` turns a paired difference into a
sentence whose verdict follows its interval, and adds a prospective power statement
(:mod:`gmts_core.experiments.power`): how many seeds separate a stated difference 80% of the
time, and what more problems or more answers per problem would change. With one seed there is
no verdict: its interval covers only this run's weights, not the recipe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gmts_core.experiments.intervals import (
    CONFIDENCE,
    MIN_SEEDS_FOR_VERDICT,
    mean_interval,
    variance_components,
)
from gmts_core.experiments.power import (
    DEFAULT_EFFECT,
    Design,
    PowerAdvice,
    advise,
    answer_noise_bound,
)


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% interval."""

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
    # for the stated effect and for the observed difference (None for the reference, one seed)
    advice: PowerAdvice | None = None
    advice_observed: PowerAdvice | None = None


@dataclass(frozen=True)
class CompareStatistics:
    methods: list[MethodStatistics]
    reference: str
    num_seeds: int
    num_problems: int
    per_problem: bool  # False: a file without per-problem results, seeds only
    answers: int = 1  # answers per held-out problem

    def row(self, method: str) -> MethodStatistics:
        return next(m for m in self.methods if m.method == method)

    def verdicts_allowed(self) -> bool:
        """A verdict needs per-problem scores and enough seeds to see seed-to-seed variance."""
        return self.per_problem and self.num_seeds >= MIN_SEEDS_FOR_VERDICT


def _interval(table: NDArray[np.float64], low: float, high: float) -> Interval:
    i = mean_interval(table, CONFIDENCE)
    clip = lambda v: float(min(max(v, low), high))  # noqa: E731 -- a proportion stays in range
    return Interval(clip(i.mean), clip(i.ci_low), clip(i.ci_high))


def compare_statistics(
    methods: Sequence[str],
    finals: NDArray[np.float64],
    start: NDArray[np.float64],
    reference: str,
    per_problem: bool = True,
    answers: int = 1,
    effect: float = DEFAULT_EFFECT,
) -> CompareStatistics:
    """Intervals of every method from ``finals`` (M, S, P): per method, seed and problem, the
    final held-out accuracy (the mean of ``answers`` answers), and ``start`` (P,): the start
    model's per-problem accuracy (one start for every seed); power advice for ``effect`` and
    for the observed difference of each method to ``reference``."""
    _, s, p = finals.shape
    ref_index = list(methods).index(reference)
    ref = finals[ref_index]  # (S, P)
    design = Design(s, p, answers)
    rows = []
    for i, name in enumerate(methods):
        diff_table = finals[i] - ref  # (S, P)
        diff = _interval(diff_table, -1.0, 1.0)
        advice = observed = None
        identical = bool(np.array_equal(finals[i], ref))
        if name != reference and s >= MIN_SEEDS_FOR_VERDICT and per_problem and not identical:
            components = variance_components(diff_table)
            noise = answer_noise_bound(finals[[i, ref_index]], answers)
            advice = advise(effect, components, noise, design)
            if diff.mean != 0:
                observed = advise(abs(diff.mean), components, noise, design)
        rows.append(
            MethodStatistics(
                method=name,
                final_accuracy=_interval(finals[i], 0.0, 1.0),
                gain=_interval(finals[i] - start[None, :], -1.0, 1.0),
                paired_difference=None if name == reference else diff,
                identical=identical,
                advice=advice,
                advice_observed=observed,
            )
        )
    return CompareStatistics(rows, reference, s, p, per_problem, answers)


def points(x: float) -> str:
    """A difference of accuracies in percentage points, signed, with a true minus sign; a value
    below 0 that rounds to 0 keeps its sign ("−0.0"), so a bound just under 0 reads as one."""
    text = f"{100 * x:+.1f}"
    if text == "-0.0" and x == 0.0:
        text = "+0.0"
    return text.replace("-", "\u2212")


def _seeds(n: int | None, limit: str) -> str:
    return f"{n} seeds" if n is not None else f"no number of seeds {limit}"


def power_sentence(stats: CompareStatistics, method: str) -> str:
    """What a new compare needs: seeds for 80% power at the stated effect and at the observed
    difference, and the seeds with 4x the problems or 4x the answers per problem."""
    row = stats.row(method)
    a = row.advice
    if a is None or a.power_now is None:
        return ""
    size = f"{stats.num_problems} problems \u00d7 {stats.answers} answer{'s' * (stats.answers > 1)}"
    within = "(up to 1,000)"
    text = (
        f"Power: {_seeds(a.seeds_needed, within)} would separate a true "
        f"{100 * a.difference:.1f}-point difference {a.target:.0%} of the time at {size} "
        f"(these {stats.num_seeds} seeds: {a.power_now:.0%})"
    )
    o = row.advice_observed
    if o is not None and o.difference != a.difference:
        text += (
            f"; for the observed {100 * o.difference:.1f} points, {_seeds(o.seeds_needed, within)}"
        )
    shares = ", ".join(f"{k} {v:.0%}" for k, v in a.shares.items())
    text += (
        f". For {100 * a.difference:.1f} points with 4\u00d7 the problems: "
        f"{_seeds(a.seeds_with_more_problems, within)}; with 4\u00d7 the answers per problem: "
        f"at best {_seeds(a.seeds_with_more_answers, within)}. "
        f"This compare's variance: {shares} (residual: seed \u00d7 problem and answer sampling)."
    )
    return text


def conclusion(stats: CompareStatistics, method: str) -> str:
    """``method`` minus the reference, its interval, what it lets one say, and the power."""
    row = stats.row(method)
    d = row.paired_difference
    if d is None:
        raise ValueError(f"{method!r} is the reference method; it has no paired difference")
    head = f"{method} \u2212 {stats.reference}: {points(d.mean)} points"
    head += f" [{points(d.ci_low)}, {points(d.ci_high)}]"
    seeds = f"{stats.num_seeds} seed{'s' if stats.num_seeds != 1 else ''}"
    size = f"{seeds} \u00d7 {stats.num_problems} problems"
    if not stats.per_problem:  # a few seeds' spread alone is far too narrow to call
        return (
            f"{head} over {seeds} only: this file has no per-problem scores, so the problems' "
            "noise is not counted and no verdict is given (a new `gmts compare` keeps them)."
        )
    if row.identical:
        return f"{head} with {size}: the same score on every seed and problem, nothing to separate."
    if stats.num_seeds < MIN_SEEDS_FOR_VERDICT:
        return (
            f"{head} with {size}: no verdict. One seed shows no seed-to-seed variance, so this "
            "interval covers only this run's weights (its problems and answers), not the "
            f"method; run at least {MIN_SEEDS_FOR_VERDICT} seeds for a verdict and power advice."
        )
    if d.excludes_zero():
        better = method if d.mean > 0 else stats.reference
        verdict = (
            f"{head}, separable with {size} (the {CONFIDENCE:.0%} interval excludes 0): "
            f"{better} is better."
        )
    else:
        verdict = f"{head}, not separable with {size} (the {CONFIDENCE:.0%} interval holds 0)."
    power = power_sentence(stats, method)
    return f"{verdict} {power}" if power else verdict


def conclusions(stats: CompareStatistics) -> list[str]:
    """A sentence per method against the reference, ``gmts`` first (the paper's question)."""
    others = [m.method for m in stats.methods if m.method != stats.reference]
    others.sort(key=lambda name: name != "gmts")
    return [conclusion(stats, name) for name in others]
