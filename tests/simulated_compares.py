"""Simulated compares for the statistics' calibration tests: two methods, S seeds, P problems.

Each problem p has a difficulty ``beta_p`` (logit scale, shared by every method and seed); each
method m a seed effect ``a_ms`` (how well seed s trained it) and a problem effect ``g_mp`` (which
problems it learnt, shared by its seeds); an answer is right with probability
``sigmoid(base + mu_m + beta_p + a_ms + g_mp)`` and each cell is the mean of k Bernoulli answers
(the evaluation's sampling noise). The true accuracy of a method is the expectation over seeds
and problems: ``E sigmoid(base + mu_m + Z)``, Z normal with the three variances summed, by
Gauss-Hermite quadrature, so a true difference of exactly D is set by solving for ``mu``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gmts_core.experiments.intervals import (
    VarianceComponents,
    _mean_squares,
    interval_half_widths,
    variance_components,
)
from gmts_core.experiments.power import MAX_SEEDS, power, seeds_for_power


@dataclass(frozen=True)
class Setting:
    """Standard deviations on the logit scale and the evaluation's size."""

    name: str
    seed_sd: float  # a_ms: seed-to-seed spread of a method's training
    problem_sd: float  # g_mp: a method's own problem-by-problem spread
    difficulty_sd: float = 1.5  # beta_p
    base: float = 0.0  # logit of about 50% accuracy, the demo task's start
    problems: int = 200
    answers: int = 1


SETTINGS = (
    Setting("seed-dominated", seed_sd=0.3, problem_sd=0.05),
    Setting("problem-dominated", seed_sd=0.02, problem_sd=0.45),
    Setting("problem-dominated, 20 problems", seed_sd=0.02, problem_sd=0.45, problems=20),
    # the replication's runs: accuracy near 0.5, seed-to-seed sd of a method about 2 points,
    # one answer per problem at T = 1 (the residual dominates)
    Setting("realistic", seed_sd=0.1, problem_sd=0.3),
    Setting("realistic, 4 answers per problem", seed_sd=0.1, problem_sd=0.3, answers=4),
    Setting("near the ceiling (about 90%)", seed_sd=0.2, problem_sd=0.3, base=3.0),
)
POWER_SETTINGS = SETTINGS[:2] + SETTINGS[3:4]  # seed-, problem-dominated and realistic

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


def true_accuracy(s: Setting, mu: float) -> float:
    """E sigmoid(base + mu + Z), Z ~ N(0, difficulty^2 + seed^2 + problem^2)."""
    sd = float(np.sqrt(s.difficulty_sd**2 + s.seed_sd**2 + s.problem_sd**2))
    z = s.base + mu + sd * _NODES
    return float((_WEIGHTS / (1 + np.exp(-z))).sum() / _WEIGHTS.sum())


def mu_for_difference(s: Setting, difference: float) -> float:
    """The method's logit shift whose true accuracy is the reference's plus ``difference``."""
    target = true_accuracy(s, 0.0) + difference
    low, high = -5.0, 5.0
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (mid, high) if true_accuracy(s, mid) < target else (low, mid)
    return (low + high) / 2


def simulate(
    s: Setting, seeds: int, sims: int, mu: float, rng: np.random.Generator, problems: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``sims`` compares: finals (sims, 2, S, P) of [reference, method] and the start (sims, P)."""
    p = problems or s.problems
    beta = rng.normal(0, s.difficulty_sd, (sims, 1, 1, p))
    a = rng.normal(0, s.seed_sd, (sims, 2, seeds, 1))
    g = rng.normal(0, s.problem_sd, (sims, 2, 1, p))
    shift = np.array([0.0, mu]).reshape(1, 2, 1, 1)
    prob = 1 / (1 + np.exp(-(s.base + shift + beta + a + g)))  # (sims, 2, S, P)
    finals = rng.binomial(s.answers, prob) / s.answers
    start_prob = 1 / (1 + np.exp(-(s.base + beta[:, 0, 0, :])))
    start = rng.binomial(s.answers, start_prob) / s.answers
    return finals.astype(np.float64), start.astype(np.float64)


# --- the calibration studies (tests/gmts_core/experiments/test_*_simulation.py, docs) ---------


def _separable_and_covered(
    tables: NDArray[np.float64], truth: float
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Per (S, P) table of (N, S, P): the interval excludes 0; the interval holds ``truth``."""
    half, _, _ = interval_half_widths(tables)
    mean = tables.mean(axis=(-2, -1))
    low, high = mean - half, mean + half
    return (low > 0) | (high < 0), (low <= truth) & (truth <= high)


def coverage(
    s: Setting, seeds: int, sims: int, rng: np.random.Generator, difference: float = 0.03
) -> dict[str, float]:
    """Share of ``sims`` compares whose 95% intervals hold the true accuracy, gain and paired
    difference, and how often two *equal* methods were called separable."""
    mu = mu_for_difference(s, difference)
    acc0, acc1 = true_accuracy(s, 0.0), true_accuracy(s, mu)
    start = _start_accuracy(s)
    out = {"accuracy": 0.0, "gain": 0.0, "difference": 0.0, "equal_called_separable": 0.0}
    for n in _chunks(sims, seeds * s.problems):
        finals, first = simulate(s, seeds, n, mu, rng)
        out["accuracy"] += _separable_and_covered(finals[:, 0], acc0)[1].sum()
        out["gain"] += _separable_and_covered(finals[:, 1] - first[:, None, :], acc1 - start)[
            1
        ].sum()
        out["difference"] += _separable_and_covered(finals[:, 1] - finals[:, 0], acc1 - acc0)[
            1
        ].sum()
        equal, _ = simulate(s, seeds, n, 0.0, rng)
        out["equal_called_separable"] += _separable_and_covered(equal[:, 1] - equal[:, 0], 0.0)[
            0
        ].sum()
    return {k: float(v) / sims for k, v in out.items()}


def _start_accuracy(s: Setting) -> float:
    """E sigmoid(base + beta): the start model has no seed or method effects."""
    z = s.base + s.difficulty_sd * _NODES
    return float((_WEIGHTS / (1 + np.exp(-z))).sum() / _WEIGHTS.sum())


def _chunks(sims: int, cells: int, budget: int = 4_000_000) -> list[int]:
    """``sims`` split so that one chunk's (n, 2, S, P) arrays hold about ``budget`` cells."""
    size = max(1, budget // (2 * cells))
    return [min(size, sims - i) for i in range(0, sims, size)]


def pilot_components(
    s: Setting, mu: float, rng: np.random.Generator, seeds: int = 8, pilots: int = 400
) -> VarianceComponents:
    """The paired difference's components from the mean squares of ``pilots`` pilot compares
    of ``seeds`` seeds (their average: the components themselves, up to simulation noise)."""
    finals, _ = simulate(s, seeds, pilots, mu, rng)
    squares = _mean_squares(finals[:, 1] - finals[:, 0])  # each (pilots,)
    ms_seed, ms_problem, ms_res = (float(x.mean()) for x in squares)
    p = s.problems
    return VarianceComponents(
        max(0.0, (ms_seed - ms_res) / p), max(0.0, (ms_problem - ms_res) / seeds), ms_res, seeds, p
    )


def separable_share(
    s: Setting, seeds: int, mu: float, sims: int, rng: np.random.Generator
) -> float:
    """Share of ``sims`` fresh compares of ``seeds`` seeds that call the difference separable."""
    hits = 0
    for n in _chunks(sims, seeds * s.problems):
        finals, _ = simulate(s, seeds, n, mu, rng)
        hits += int(_separable_and_covered(finals[:, 1] - finals[:, 0], 0.0)[0].sum())
    return hits / sims


def power_check(
    s: Setting, difference: float, sims: int, rng: np.random.Generator
) -> dict[str, float | int | None]:
    """The advice's seeds for ``difference`` (components from pilots) and the share of fresh
    compares of that many seeds that separate it."""
    mu = mu_for_difference(s, difference)
    c = pilot_components(s, mu, rng)
    m = seeds_for_power(difference, c)
    share = None if m is None else separable_share(s, m, mu, sims, rng)
    return {"seeds": m, "predicted": None if m is None else power(difference, c, m), "share": share}


def pilot_workflow(
    s: Setting, difference: float, pilots: int, rng: np.random.Generator, seeds: int = 8
) -> dict[str, float]:
    """A user's workflow: one pilot of ``seeds`` seeds, its advice's M, then a fresh compare of
    M seeds. Returns the share of follow-ups that separate and the median M."""
    mu = mu_for_difference(s, difference)
    finals, _ = simulate(s, seeds, pilots, mu, rng)
    hits, advised = 0, []
    for table in finals[:, 1] - finals[:, 0]:
        m = seeds_for_power(difference, variance_components(table))
        advised.append(m or MAX_SEEDS)
        if m is not None:
            hits += separable_share(s, m, mu, 1, rng) > 0
    return {"share": hits / pilots, "median_seeds": float(np.median(advised))}


def main() -> None:
    """Print the tables of docs/statistics.md (about two minutes on one core)."""
    rng = np.random.default_rng(46)
    print("| setting | seeds | accuracy | gain | difference | equal methods called separable |")
    print("|---|---|---|---|---|---|")
    for s in SETTINGS:
        for seeds in (2, 3, 5, 8, 16):
            c = coverage(s, seeds, 2000, rng)
            print(
                f"| {s.name} | {seeds} | {c['accuracy']:.1%} | {c['gain']:.1%} | "
                f"{c['difference']:.1%} | {c['equal_called_separable']:.1%} |"
            )
    print()
    print("| setting | true difference | advised seeds | predicted power | separated (2,000) |")
    print("|---|---|---|---|---|")
    for s in POWER_SETTINGS:
        for d in (0.03, 0.05):
            r = power_check(s, d, 2000, rng)
            pred = "—" if r["predicted"] is None else f"{r['predicted']:.1%}"
            share = "—" if r["share"] is None else f"{r['share']:.1%}"
            print(f"| {s.name} | {100 * d:.0f} points | {r['seeds']} | {pred} | {share} |")
    print()
    print("| setting | true difference | median advised seeds | follow-ups that separated |")
    print("|---|---|---|---|")
    for s in POWER_SETTINGS:
        w = pilot_workflow(s, 0.03, 300, rng)
        print(f"| {s.name} | 3 points | {w['median_seeds']:.0f} | {w['share']:.1%} |")


if __name__ == "__main__":
    main()
