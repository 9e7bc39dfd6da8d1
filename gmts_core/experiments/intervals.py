"""The interval of a compare's mean: seeds x problems variance components and a t interval.

A compare scores each method on every held-out problem p after training from every seed s: a
table ``(S, P)`` of per-problem accuracies (or of paired differences, method minus reference on
the same seed and problem). Both the seeds and the problems are draws from populations (other
seeds would train other weights; other problems of the task would be as fair), so the mean of
the table is read as a random-effects two-way layout, one value per cell:

    y_sp = mu + a_s + b_p + e_sp,   Var(mean) = var_seed / S + var_problem / P + var_res / (S P)

(``e_sp`` holds the seed-by-problem interaction and the evaluation's answer sampling). The
components come from the two-way ANOVA's mean squares, each floored at 0, and the interval is
``mean +- t * sqrt(Var(mean))`` with Satterthwaite's degrees of freedom for the combination of
mean squares: with few seeds and a large seed part the degrees of freedom fall towards S - 1 and
the t quantile widens the interval as a studentised seed component must (with 2 seeds and a
seed-dominated difference, t has about 1 degree of freedom: 12.7 instead of 1.96). The interval
is the wider of that one and the per-seed means' own t interval (S - 1 degrees of freedom):
Satterthwaite's degrees of freedom are estimated, and too many exactly when a small seed mean
square has shrunk the variance; alone, the first covered 87% with 2 seeds of a seed-dominated
difference in simulation, the pair at least 93% in every simulated setting.

One seed shows no seed-to-seed variance: its interval (``seed_variance_seen`` False) counts the
problems and the answers only, so it covers *this run's weights*, not the recipe; no verdict
may be drawn from it. ``docs/statistics.md`` has the coverage of these intervals by simulation
(`tests/gmts_core/experiments/test_intervals_simulation.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

CONFIDENCE = 0.95
MIN_SEEDS_FOR_VERDICT = 2  # one seed cannot show seed-to-seed variance (see the docstring)


@dataclass(frozen=True)
class VarianceComponents:
    """Variance of one per-(seed, problem) value split as seed + problem + residual.

    ``seed`` is None with one seed (the seed-to-seed part is unknown). The residual holds the
    seed-by-problem interaction and the answers' sampling noise.
    """

    seed: float | None
    problem: float
    residual: float
    num_seeds: int
    num_problems: int

    def variance_of_mean(self, num_seeds: int, num_problems: int | None = None) -> float | None:
        """Var of the mean over ``num_seeds`` seeds and ``num_problems`` problems (default: this
        table's); None when the seed part is unknown."""
        if self.seed is None:
            return None
        p = num_problems or self.num_problems
        return self.seed / num_seeds + self.problem / p + self.residual / (num_seeds * p)

    def degrees_of_freedom(self, num_seeds: int, num_problems: int | None = None) -> float:
        """Satterthwaite's degrees of freedom of ``variance_of_mean`` at that size, from the
        mean squares these components imply (``inf`` when the variance is 0)."""
        s, p = num_seeds, num_problems or self.num_problems
        seed = self.seed or 0.0
        df = _satterthwaite(
            self.residual + p * seed, self.residual + s * self.problem, self.residual, s, p
        )
        return float(df)


@dataclass(frozen=True)
class MeanInterval:
    """A table's mean with its t interval and what the interval is over."""

    mean: float
    ci_low: float
    ci_high: float
    std_error: float
    df: float
    seed_variance_seen: bool  # False: one seed, the interval covers only this run's weights

    def excludes_zero(self) -> bool:
        return self.ci_low > 0.0 or self.ci_high < 0.0


def _mean_squares(table: NDArray[np.float64]) -> tuple[Any, Any, Any]:
    """(MS_seed, MS_problem, MS_res) of (..., S, P) tables, S, P >= 2 (arrays of shape (...))."""
    s, p = table.shape[-2:]
    grand = table.mean(axis=(-2, -1), keepdims=True)
    by_seed, by_problem = table.mean(axis=-1, keepdims=True), table.mean(axis=-2, keepdims=True)
    ms_seed = p * ((by_seed - grand) ** 2).sum(axis=(-2, -1)) / (s - 1)
    ms_problem = s * ((by_problem - grand) ** 2).sum(axis=(-2, -1)) / (p - 1)
    resid = table - by_seed - by_problem + grand
    ms_res = (resid**2).sum(axis=(-2, -1)) / ((s - 1) * (p - 1))
    return ms_seed, ms_problem, ms_res


def _satterthwaite(ms_seed: Any, ms_problem: Any, ms_res: Any, s: int, p: int) -> Any:
    """Degrees of freedom of max(MS_seed, MS_res) + max(MS_problem - MS_res, 0), the floored
    estimate of S P Var(mean), each mean square with its own degrees of freedom (arrays or
    floats; ``inf`` where the estimate is 0)."""
    df_res = (s - 1) * (p - 1)
    seed_part = np.maximum(ms_seed, ms_res)
    seed_df = np.where(ms_seed >= ms_res, s - 1, df_res)
    has_problem = ms_problem > ms_res
    total = seed_part + np.where(has_problem, ms_problem - ms_res, 0.0)
    spread = seed_part**2 / seed_df + np.where(
        has_problem, ms_problem**2 / (p - 1) + ms_res**2 / df_res, 0.0
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where((total > 0) & (spread > 0), total**2 / spread, np.inf)
    return np.maximum(df, 1.0)


def variance_components(table: NDArray[np.float64]) -> VarianceComponents:
    """Two-way ANOVA (seeds x problems, one value per cell) of a (S, P) table.

    var_res = MS_res, var_seed = (MS_seed - MS_res) / P, var_problem = (MS_problem - MS_res) / S,
    floored at 0. With one problem (a file without per-problem results) the whole spread over
    seeds is the seed part; with one seed the seed part is unknown (None) and the spread over
    problems is the problem part.
    """
    s, p = table.shape
    if p == 1:
        seed = float(table[:, 0].var(ddof=1)) if s > 1 else None
        return VarianceComponents(seed, 0.0, 0.0, s, p)
    if s == 1:
        return VarianceComponents(None, float(table[0].var(ddof=1)), 0.0, s, p)
    ms_seed, ms_problem, ms_res = (float(x) for x in _mean_squares(table))
    return VarianceComponents(
        seed=max(0.0, (ms_seed - ms_res) / p),
        problem=max(0.0, (ms_problem - ms_res) / s),
        residual=ms_res,
        num_seeds=s,
        num_problems=p,
    )


def _t_quantile(confidence: float, df: Any) -> Any:
    from scipy import stats  # heavy: scipy.stats loads only when an interval is computed

    return stats.t.ppf(0.5 + confidence / 2, df)


def interval_half_widths(
    tables: NDArray[np.float64], confidence: float = CONFIDENCE
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Half-widths, standard errors and degrees of freedom of the mean of (..., S, P) tables,
    S, P >= 2 (the calibration simulations run thousands at once).

    Var(mean) = (max(MS_seed, MS_res) + max(MS_problem - MS_res, 0)) / (S P), the floored
    components' sum; the half-width is the wider of t(Satterthwaite df) * se and the per-seed
    means' own t interval, t(S - 1) * sqrt(MS_seed / (S P)): Satterthwaite's estimated degrees
    of freedom are too many when a small seed mean square happens to shrink the variance (2-3
    seeds of a seed-dominated difference), and the second keeps the coverage there.
    """
    s, p = tables.shape[-2:]
    ms_seed, ms_problem, ms_res = _mean_squares(tables)
    var = (np.maximum(ms_seed, ms_res) + np.maximum(ms_problem - ms_res, 0.0)) / (s * p)
    df = _satterthwaite(ms_seed, ms_problem, ms_res, s, p)
    se = np.sqrt(var)
    seeds_only = np.sqrt(ms_seed / (s * p))
    half = np.maximum(
        np.where(se > 0, _t_quantile(confidence, df) * se, 0.0),
        _t_quantile(confidence, s - 1) * seeds_only,
    )
    return np.asarray(half), np.asarray(se), np.asarray(df)


def mean_interval(table: NDArray[np.float64], confidence: float = CONFIDENCE) -> MeanInterval:
    """The mean of an (S, P) table with its t interval over seeds and problems.

    S >= 2, P >= 2: :func:`interval_half_widths`. S == 1: over problems only
    (``seed_variance_seen`` False: this run's weights). P == 1 (one value per seed): over seeds
    only, S - 1 degrees of freedom. A table of one value has the interval [mean, mean].
    """
    s, p = table.shape
    mean = float(table.mean())
    if s >= 2 and p >= 2:
        half, se, df = (float(x) for x in interval_half_widths(table, confidence))
        return MeanInterval(mean, mean - half, mean + half, se, df, seed_variance_seen=True)
    if s * p >= 2:
        values = table.ravel()
        se, df = math.sqrt(float(values.var(ddof=1)) / values.size), float(values.size - 1)
    else:
        se, df = 0.0, math.inf
    half = 0.0 if se == 0.0 else float(_t_quantile(confidence, df)) * se
    return MeanInterval(mean, mean - half, mean + half, se, df, seed_variance_seen=s >= 2)
