"""The paired bootstrap over seeds and problems against a plain loop, and its intervals."""

from __future__ import annotations

import numpy as np
import pytest

from gmts_core.experiments.bootstrap import (
    bootstrap_means,
    bootstrap_replicates,
    draw_resamples,
    percentile_interval,
)


def naive_bootstrap_means(values: np.ndarray, seeds: np.ndarray, problems: np.ndarray) -> list:
    """Replicate by replicate: copy the drawn seeds, then the drawn problems, and average."""
    out = []
    for m in range(values.shape[0]):
        row = []
        for b in range(seeds.shape[0]):
            cells = [values[m, s, p] for s in seeds[b] for p in problems[b]]
            row.append(sum(cells) / len(cells))
        out.append(row)
    return out


@pytest.mark.parametrize(("methods", "seeds", "problems"), [(1, 1, 1), (2, 3, 5), (3, 2, 7)])
def test_bootstrap_means_match_the_naive_loop(methods: int, seeds: int, problems: int) -> None:
    rng = np.random.default_rng(methods * 100 + seeds * 10 + problems)
    values = rng.integers(0, 2, size=(methods, seeds, problems)).astype(np.float64)
    draws = draw_resamples(seeds, problems, replicates=50, seed=3)
    assert draws.seeds.shape == (50, seeds) and draws.problems.shape == (50, problems)
    fast = bootstrap_means(values, draws)
    np.testing.assert_allclose(fast, naive_bootstrap_means(values, draws.seeds, draws.problems))


def test_chunked_replicates_are_the_draws_of_one_generator() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(0, 2, size=(2, 3, 6)).astype(np.float64)
    whole = bootstrap_replicates(values, replicates=40, seed=2)
    assert np.array_equal(whole, bootstrap_means(values, draw_resamples(3, 6, 40, seed=2)))
    chunked = bootstrap_replicates(values, replicates=40, seed=2, max_cells=6 * 7)  # 7 a chunk
    assert chunked.shape == (2, 40) and np.array_equal(
        chunked, bootstrap_replicates(values, replicates=40, seed=2, max_cells=6 * 7)
    )
    assert abs(chunked.mean() - values.mean()) < 0.1  # centred on the data's mean


def test_draws_are_seeded_and_intervals_are_percentiles() -> None:
    a, b = draw_resamples(3, 8, 20, seed=5), draw_resamples(3, 8, 20, seed=5)
    assert np.array_equal(a.seeds, b.seeds) and np.array_equal(a.problems, b.problems)
    reps = np.arange(101, dtype=np.float64)  # 0 .. 100
    assert percentile_interval(reps, 0.95) == pytest.approx((2.5, 97.5))


def test_means_of_proportions_stay_in_unit_range() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2, size=(2, 2, 10)).astype(np.float64)
    means = bootstrap_means(values, draw_resamples(2, 10, 500))
    assert means.min() >= 0.0 and means.max() <= 1.0 + 1e-12
