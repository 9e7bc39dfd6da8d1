"""A paired bootstrap over training seeds and held-out problems (the replication's curves).

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

The final table of a compare uses the t interval of :mod:`gmts_core.experiments.intervals`
instead: this two-way bootstrap counts the seed-by-problem residual about three times (each
replicate redraws it with both the seeds and the problems), so its intervals are wider than
their level, and it has no studentised seed part for a few seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

REPLICATES = 4000
BOOTSTRAP_SEED = 0  # the bootstrap's own generator: the same data give the same intervals


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
