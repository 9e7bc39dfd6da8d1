"""The seeds x problems variance components and the t interval of a compare's mean."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gmts_core.experiments.intervals import mean_interval, variance_components


def test_variance_components_recover_a_two_way_layout() -> None:
    # d_sp = seed effect + problem effect exactly (no residual): ANOVA splits it back
    seed = np.array([0.0, 0.2, -0.2, 0.1])
    problem = np.array([0.3, -0.1, 0.0, 0.2, -0.4])
    table = seed[:, None] + problem[None, :]
    c = variance_components(table)
    assert c.residual == pytest.approx(0.0, abs=1e-15)
    assert c.seed == pytest.approx(seed.var(ddof=1))
    assert c.problem == pytest.approx(problem.var(ddof=1))
    assert variance_components(table[:1]).seed is None  # one seed: unknown
    single = variance_components(table[:, :1])  # one value per seed (no per-problem scores)
    assert single.seed == pytest.approx(seed.var(ddof=1)) and single.problem == 0.0


def test_the_interval_is_the_naive_formula() -> None:
    rng = np.random.default_rng(3)
    table = rng.normal(0, 1, (4, 30)) + rng.normal(0, 0.5, (4, 1)) + rng.normal(0, 0.8, (1, 30))
    s, p = table.shape
    grand = table.mean()
    ms_s = p * ((table.mean(1) - grand) ** 2).sum() / (s - 1)
    ms_p = s * ((table.mean(0) - grand) ** 2).sum() / (p - 1)
    res = table - table.mean(1, keepdims=True) - table.mean(0, keepdims=True) + grand
    ms_r = (res**2).sum() / ((s - 1) * (p - 1))
    assert ms_s > ms_r and ms_p > ms_r  # every term of the combination is in play
    var = (ms_s + ms_p - ms_r) / (s * p)
    df = (ms_s + ms_p - ms_r) ** 2 / (
        ms_s**2 / (s - 1) + ms_p**2 / (p - 1) + ms_r**2 / ((s - 1) * (p - 1))
    )
    half = max(
        stats.t.ppf(0.975, df) * var**0.5,
        stats.t.ppf(0.975, s - 1) * (ms_s / (s * p)) ** 0.5,  # the per-seed means' own interval
    )
    got = mean_interval(table)
    assert got.df == pytest.approx(df) and got.std_error == pytest.approx(var**0.5)
    assert (got.ci_low, got.ci_high) == pytest.approx((grand - half, grand + half))
    assert got.seed_variance_seen


def test_the_per_seed_interval_is_a_plain_t_interval_of_the_seed_means() -> None:
    # no problem effect, a large seed effect: the seeds-only interval is the wider one
    rng = np.random.default_rng(0)
    table = rng.normal(0, 0.01, (3, 50)) + np.array([[0.3], [-0.2], [0.1]])
    means = table.mean(axis=1)
    half = stats.t.ppf(0.975, 2) * means.std(ddof=1) / 3**0.5
    got = mean_interval(table)
    assert got.ci_high - got.mean == pytest.approx(half)


def test_one_seed_covers_only_this_run_and_identical_runs_give_zero() -> None:
    rng = np.random.default_rng(1)
    one = rng.integers(0, 2, (1, 40)).astype(np.float64)
    got = mean_interval(one)
    assert not got.seed_variance_seen  # problems only: this run's weights
    assert got.ci_low < got.mean < got.ci_high
    zero = mean_interval(np.zeros((3, 40)))
    assert (zero.mean, zero.ci_low, zero.ci_high) == (0.0, 0.0, 0.0)
