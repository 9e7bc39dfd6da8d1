"""A paired bootstrap over training seeds and held-out problems, and how many seeds would do.

A compare measures each method's held-out score on every problem p of one fixed held-out set
after training from every seed s: an array ``(M, S, P)`` of per-problem accuracies in [0, 1]
(methods x seeds x problems). Two sources of noise move a final accuracy: which seeds trained
the model, and which problems were asked. The bootstrap redraws both, in that order: each
replicate draws S seeds with replacement, then P problems with replacement, and takes the mean
over the drawn seeds x problems. The problems are drawn once per replicate for all drawn seeds
(and all methods), because every seed is evaluated on the *same* problems: a problem's
difficulty is shared by all seeds, and redrawing problems per seed would count that shared
part as independent noise and narrow the interval. Every method sees the same draws, so a
paired difference (method minus reference, same seeds and problems) keeps its pairing, and
identical runs give a difference of exactly 0 in every replicate.

Intervals are percentile intervals of the replicates; a mean of values in [0, 1] stays in
[0, 1], so accuracy intervals do too (clipped only against float rounding).

:func:`seeds_to_separate` answers "how many seeds would separate this difference": it splits
the paired differences' variance into seed, problem and residual components (two-way ANOVA of
the seeds x problems table, each component floored at 0) and solves
``z * sqrt(var_seed / S + var_problem / P + var_residual / (S P)) < |difference|`` for S at
this run's number of problems (a normal approximation of the interval's half-width).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

REPLICATES = 4000
BOOTSTRAP_SEED = 0  # the bootstrap's own generator: the same data give the same intervals
Z_95 = 1.959963984540054  # the normal 97.5% quantile


@dataclass(frozen=True)
class Resamples:
    """The draws of a bootstrap: ``seeds`` (B, S) and ``problems`` (B, P) indices."""

    seeds: NDArray[np.int64]
    problems: NDArray[np.int64]


def draw_resamples(
    num_seeds: int, num_problems: int, replicates: int = REPLICATES, seed: int = BOOTSTRAP_SEED
) -> Resamples:
    """B replicates of seeds, then problems, each drawn uniformly with replacement."""
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, num_seeds, size=(replicates, num_seeds))
    problems = rng.integers(0, num_problems, size=(replicates, num_problems))
    return Resamples(seeds, problems)


def _counts(index: NDArray[np.int64], n: int) -> NDArray[np.float64]:
    """(B, k) drawn indices -> (B, n) how often each of the n items was drawn."""
    b = index.shape[0]
    flat = (index + n * np.arange(b)[:, None]).ravel()
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def bootstrap_means(values: NDArray[np.float64], draws: Resamples) -> NDArray[np.float64]:
    """The mean over each replicate's drawn seeds x problems, for every method.

    values: (M, S, P); returns (M, B). The mean of replicate b is
    sum_s sum_p c_s[b, s] c_p[b, p] values[m, s, p] / (S P), with c the draw counts, so no
    resampled copy of the data is built.
    """
    m, s, p = values.shape
    cs = _counts(draws.seeds, s)  # (B, S)
    cp = _counts(draws.problems, p)  # (B, P)
    by_seed = np.einsum("msp,bp->mbs", values, cp)  # (M, B, S)
    return np.einsum("mbs,bs->mb", by_seed, cs) / (s * p)


def bootstrap_replicates(
    values: NDArray[np.float64],
    replicates: int = REPLICATES,
    seed: int = BOOTSTRAP_SEED,
    max_cells: int = 4_000_000,
) -> NDArray[np.float64]:
    """(M, B) replicate means of ``values`` (M, S, P), drawn in chunks of replicates so the draw
    counts never hold more than about ``max_cells`` numbers (held-out sets can be large)."""
    _, s, p = values.shape
    rng = np.random.default_rng(seed)
    chunk = max(1, min(replicates, max_cells // max(s, p)))
    out = []
    for first in range(0, replicates, chunk):
        n = min(chunk, replicates - first)
        draws = Resamples(rng.integers(0, s, size=(n, s)), rng.integers(0, p, size=(n, p)))
        out.append(bootstrap_means(values, draws))
    return np.concatenate(out, axis=1)


def percentile_interval(
    replicates: NDArray[np.float64], confidence: float = 0.95
) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of 1-D replicates."""
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class VarianceComponents:
    """Variance of one per-(seed, problem) value split as seed + problem + residual."""

    seed: float | None  # None: one seed, the seed-to-seed part is unknown
    problem: float
    residual: float
    num_seeds: int
    num_problems: int

    def variance_of_mean(self, num_seeds: int) -> float | None:
        """Var of the mean over ``num_seeds`` seeds and this run's problems."""
        if self.seed is None:
            return None
        p = self.num_problems
        return self.seed / num_seeds + self.problem / p + self.residual / (num_seeds * p)


def variance_components(table: NDArray[np.float64]) -> VarianceComponents:
    """Two-way ANOVA (seeds x problems, one value per cell) of a (S, P) table.

    Mean squares MS_seed = P sum_s (d_s. - d..)^2 / (S-1), MS_problem = S sum_p (d_.p - d..)^2
    / (P-1), MS_res = sum (d_sp - d_s. - d_.p + d..)^2 / ((S-1)(P-1)); components
    var_res = MS_res, var_seed = (MS_seed - MS_res) / P, var_problem = (MS_problem - MS_res) / S,
    floored at 0. With one problem (a file without per-problem results) the whole spread over
    seeds is the seed part; with one seed the seed part is unknown (None).
    """
    s, p = table.shape
    grand = table.mean()
    by_seed, by_problem = table.mean(axis=1), table.mean(axis=0)
    if p == 1:
        seed = float(table[:, 0].var(ddof=1)) if s > 1 else None
        return VarianceComponents(seed, 0.0, 0.0, s, p)
    ms_problem = s * float(((by_problem - grand) ** 2).sum()) / (p - 1)
    if s == 1:
        return VarianceComponents(None, ms_problem, 0.0, s, p)
    ms_seed = p * float(((by_seed - grand) ** 2).sum()) / (s - 1)
    resid = table - by_seed[:, None] - by_problem[None, :] + grand
    ms_res = float((resid**2).sum()) / ((s - 1) * (p - 1))
    return VarianceComponents(
        seed=max(0.0, (ms_seed - ms_res) / p),
        problem=max(0.0, (ms_problem - ms_res) / s),
        residual=ms_res,
        num_seeds=s,
        num_problems=p,
    )


def seeds_to_separate(
    difference: float, components: VarianceComponents, z: float = Z_95, max_seeds: int = 100_000
) -> int | None:
    """The fewest seeds whose interval half-width ``z sqrt(Var(mean))`` is below ``|difference|``
    at this run's number of problems; None when no number of seeds would (the difference is 0,
    the problems' own noise is already as wide, or the seed part is unknown)."""
    c = components
    target = (abs(difference) / z) ** 2
    if c.seed is None or difference == 0 or target <= c.problem / c.num_problems:
        return None
    per_seed = c.seed + c.residual / c.num_problems  # the part that shrinks as 1 / S
    if per_seed == 0:
        return 1
    needed = math.floor(per_seed / (target - c.problem / c.num_problems)) + 1
    return needed if needed <= max_seeds else None
