"""Prospective power of a compare: how many seeds find a difference of a stated size, 80% of
the time, and which of seeds, problems and answers per problem would cut the noise most.

A new compare with S seeds and P problems measures the paired difference's mean with
``Var(mean) = var_seed / S + var_problem / P + var_res / (S P)`` (the components of
:mod:`gmts_core.experiments.intervals`, estimated from a finished compare on the scale its
intervals use), and calls it separable when its t interval (Satterthwaite's degrees of freedom)
excludes 0. For a true difference D, ``mean / se`` is close to a non-central t with those degrees
of freedom and non-centrality ``D / sqrt(Var(mean))``, so the power is

    P(|T| > t_crit) = nct.sf(t_crit, df, ncp) + nct.cdf(-t_crit, df, ncp)

and :func:`seeds_for_power` is the fewest S with power >= 80% (checked by simulation in
`tests/gmts_core/experiments/test_power_simulation.py`, table in ``docs/statistics.md``). When
even infinitely many seeds leave ``var_problem / P`` too wide, no S does: more problems must.

The residual holds the answers' sampling noise. With one answer per problem at temperature T a
problem's answer is a Bernoulli draw with variance p (1 - p); averaged over problems that is at
most ``mean_p pbar_p (1 - pbar_p)`` for each of the two methods (pbar_p: the problem's accuracy
over seeds), so :func:`answer_noise_bound` is an upper bound of the part of the residual that
more answers per problem would divide (capped at the residual).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gmts_core.experiments.intervals import CONFIDENCE, VarianceComponents

TARGET_POWER = 0.8
DEFAULT_EFFECT = 0.03  # 3 accuracy points: the smallest gain the demo's goals care about
MAX_SEEDS = 1000


def power(
    difference: float,
    components: VarianceComponents,
    num_seeds: int,
    num_problems: int | None = None,
    confidence: float = CONFIDENCE,
) -> float | None:
    """The chance that a compare of ``num_seeds`` seeds and ``num_problems`` problems (default:
    the components' own) finds a true ``difference`` separable (its interval excludes 0).
    None when the seed part is unknown (one seed)."""
    var = components.variance_of_mean(num_seeds, num_problems)
    if var is None or num_seeds < 2:
        return None
    if var == 0.0:
        return 1.0 if difference != 0 else 0.0
    from scipy import stats  # heavy: scipy.stats loads only when power is computed

    df = components.degrees_of_freedom(num_seeds, num_problems)
    crit = float(stats.t.ppf(0.5 + confidence / 2, df))
    ncp = abs(difference) / math.sqrt(var)
    result = float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))
    if not math.isfinite(result):  # scipy's nct fails far in its tail: the normal limit there
        result = float(stats.norm.sf(crit - ncp) + stats.norm.cdf(-crit - ncp))
    return min(1.0, max(0.0, result))


def seeds_for_power(
    difference: float,
    components: VarianceComponents,
    num_problems: int | None = None,
    target: float = TARGET_POWER,
    max_seeds: int = MAX_SEEDS,
) -> int | None:
    """The fewest seeds (>= 2) whose compare separates a true ``difference`` with probability
    >= ``target``; None when none up to ``max_seeds`` does (or the seed part is unknown)."""
    if components.seed is None or difference == 0:
        return None
    if (p := power(difference, components, max_seeds, num_problems)) is None or p < target:
        return None
    low, high = 2, max_seeds  # power grows with the seeds: bisect for the first that reaches it
    while low < high:
        mid = (low + high) // 2
        if (power(difference, components, mid, num_problems) or 0.0) >= target:
            high = mid
        else:
            low = mid + 1
    return low


def answer_noise_bound(finals: NDArray[np.float64], samples_per_problem: int) -> float:
    """An upper bound of the answers' sampling variance in one cell of a paired difference.

    finals: (2, S, P) per-problem accuracies of the method and the reference, each the mean of
    ``samples_per_problem`` answers; the bound is sum over the two methods of
    mean_p pbar_p (1 - pbar_p) n / (n - 1) / k, n = S k the problem's answers (p(1-p) is
    concave, so the seeds' spread of p only lowers the truth; n / (n - 1) undoes the shrinkage
    of pbar (1 - pbar) by pbar's own noise, which would otherwise make it a bound no more).
    """
    _, s, _ = finals.shape
    n = s * samples_per_problem
    pbar = finals.mean(axis=1)  # (2, P)
    spread = float((pbar * (1 - pbar)).mean(axis=1).sum())
    return spread * (n / (n - 1) if n > 1 else 1.0) / samples_per_problem


@dataclass(frozen=True)
class Design:
    """One compare's size: seeds, problems and answers per problem."""

    seeds: int
    problems: int
    answers: int


@dataclass(frozen=True)
class PowerAdvice:
    """What a new compare needs to separate ``difference`` with ``target`` power."""

    difference: float
    target: float
    seeds_needed: int | None  # at this compare's problems and answers; None: no number will
    power_now: float | None  # this compare's size's power for ``difference``
    # the seeds needed with 4 x the problems and with 4 x the answers per problem
    seeds_with_more_problems: int | None
    seeds_with_more_answers: int | None
    shares: dict[str, float]  # this compare's Var(mean) split: seeds, problems, residual


def _scaled(c: VarianceComponents, answer_noise: float, answers_factor: int) -> VarianceComponents:
    """The components with ``answers_factor`` x the answers per problem: the sampling part of
    the residual divides by it (the rest, the seed-by-problem interaction, stays)."""
    noise = min(answer_noise, c.residual)
    residual = c.residual - noise + noise / answers_factor
    return VarianceComponents(c.seed, c.problem, residual, c.num_seeds, c.num_problems)


def advise(
    difference: float,
    components: VarianceComponents,
    answer_noise: float,
    design: Design,
    target: float = TARGET_POWER,
    factor: int = 4,
) -> PowerAdvice:
    """Seeds needed for ``difference`` at this design, at ``factor`` x problems and at
    ``factor`` x answers per problem (``answer_noise``: :func:`answer_noise_bound`)."""
    c = components
    var = c.variance_of_mean(design.seeds)
    shares = {}
    if var:
        assert c.seed is not None  # variance_of_mean is None without it
        p = design.problems
        parts = [c.seed / design.seeds, c.problem / p, c.residual / (design.seeds * p)]
        shares = dict(zip(("seeds", "problems", "residual"), (x / var for x in parts), strict=True))
    return PowerAdvice(
        difference=difference,
        target=target,
        seeds_needed=seeds_for_power(difference, c, target=target),
        power_now=power(difference, c, design.seeds),
        seeds_with_more_problems=seeds_for_power(
            difference, c, num_problems=factor * design.problems, target=target
        ),
        seeds_with_more_answers=seeds_for_power(
            difference, _scaled(c, answer_noise, factor), target=target
        ),
        shares=shares,
    )
