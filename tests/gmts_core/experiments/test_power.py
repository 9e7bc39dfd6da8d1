"""The power of a compare: the non-central t formula, the fewest seeds, and the answer-noise
bound (their calibration by simulation: test_power_simulation.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gmts_core.experiments.intervals import VarianceComponents
from gmts_core.experiments.power import (
    Design,
    advise,
    answer_noise_bound,
    power,
    seeds_for_power,
)

C = VarianceComponents(seed=0.0005, problem=0.006, residual=0.35, num_seeds=8, num_problems=200)


def test_power_is_the_noncentral_t_formula() -> None:
    s, p, d = 10, 200, 0.03
    var = C.seed / s + C.problem / p + C.residual / (s * p)  # type: ignore[operator]
    ms = (C.residual + p * C.seed, C.residual + s * C.problem, C.residual)  # type: ignore[operator]
    dfs = (s - 1, p - 1, (s - 1) * (p - 1))
    total = ms[0] + ms[1] - ms[2]
    df = total**2 / sum(m * m / k for m, k in zip(ms, dfs, strict=True))
    crit, ncp = stats.t.ppf(0.975, df), d / var**0.5
    expected = stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp)
    assert power(d, C, s) == pytest.approx(expected)


def test_seeds_for_power_is_the_fewest_that_reach_it() -> None:
    n = seeds_for_power(0.03, C)
    assert n is not None and power(0.03, C, n) >= 0.8 > power(0.03, C, n - 1)  # type: ignore[operator]
    assert seeds_for_power(0.05, C) < n  # type: ignore[operator]  # a larger effect: fewer
    assert seeds_for_power(0.0, C) is None
    one_seed = VarianceComponents(None, 0.006, 0.0, 1, 200)
    assert seeds_for_power(0.03, one_seed) is None and power(0.03, one_seed, 5) is None
    # the problems' own noise alone is too wide for 80% power: no number of seeds does it
    wide = VarianceComponents(0.0005, 0.2, 0.35, 8, 200)
    assert seeds_for_power(0.03, wide) is None
    assert seeds_for_power(0.03, wide, num_problems=4000) is not None  # more problems do


@pytest.mark.parametrize("answers", [1, 4])
def test_the_answer_noise_bound_is_above_the_true_sampling_variance(answers: int) -> None:
    rng = np.random.default_rng(answers)
    p = rng.uniform(0.05, 0.95, size=(2, 1, 300)) + rng.normal(0, 0.05, size=(2, 6, 300))
    p = p.clip(0.01, 0.99)  # (2, S, P) true per-cell accuracies, varying over seeds
    truth = float((p * (1 - p)).mean(axis=(1, 2)).sum()) / answers
    bounds = [answer_noise_bound(rng.binomial(answers, p) / answers, answers) for _ in range(200)]
    assert np.mean(bounds) >= truth


def test_advice_splits_the_variance_and_prices_each_lever() -> None:
    a = advise(0.03, C, answer_noise=0.34, design=Design(8, 200, 1))
    assert sum(a.shares.values()) == pytest.approx(1.0)
    assert a.seeds_needed == seeds_for_power(0.03, C)
    assert a.seeds_with_more_answers < a.seeds_needed  # type: ignore[operator]
    assert a.seeds_with_more_problems < a.seeds_needed  # type: ignore[operator]
    assert 0 < a.power_now < 0.8  # type: ignore[operator]
