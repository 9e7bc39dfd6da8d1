"""The gain in held-out accuracy between two evaluations of one policy, with a paired interval.

Both evaluations score the *same* problems (the session's fixed held-out set), so the gain is
the mean of the per-problem differences ``after[p] - before[p]`` and its uncertainty comes from
which problems were asked. The interval is a paired percentile bootstrap over problems: each
replicate draws P problems with replacement and takes the mean difference over them. A mean of
values in [-1, 1] stays in [-1, 1], so the interval does too, and identical evaluations give a
gain of exactly 0 with the interval [0, 0]. The bootstrap has its own seeded generator: the
same evaluations always give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gmts_core.errors import InvalidInputError

REPLICATES = 4000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class PairedGain:
    """``after - before`` accuracy (a difference of proportions, in [-1, 1]) and its interval."""

    gain: float
    low: float
    high: float
    confidence: float
    num_problems: int


def paired_gain(
    before: Sequence[float],
    after: Sequence[float],
    confidence: float = 0.95,
    replicates: int = REPLICATES,
    seed: int = BOOTSTRAP_SEED,
) -> PairedGain:
    """Mean of ``after[p] - before[p]`` over problems p, with a paired bootstrap interval.

    before, after: (P,) per-problem accuracies in [0, 1] (the mean reward of each problem's
    answers), problem p being the same problem in both.
    """
    b, a = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if b.shape != a.shape or b.ndim != 1 or b.size == 0:
        raise InvalidInputError(
            f"paired gain needs two equal, non-empty lists of problems; got {b.shape}, {a.shape}"
        )
    if not 0 < confidence < 1:
        raise InvalidInputError(f"confidence must be in (0, 1), got {confidence}")
    diff = a - b  # (P,)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, diff.size, size=(replicates, diff.size))  # (B, P)
    means = diff[draws].mean(axis=1)  # (B,)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    gain = float(diff.mean())
    # percentiles of means of values in [-1, 1]: only float rounding can leave the range
    low, high = max(-1.0, min(float(low), gain)), min(1.0, max(float(high), gain))
    return PairedGain(gain, low, high, confidence, int(diff.size))
