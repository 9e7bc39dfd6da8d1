"""The writer's ranks and top-K lists equal a stable sort of the values (ties in flat order,
NaN last, -0.0 equal to 0.0), computed without one."""

from __future__ import annotations

import numpy as np

from gmts_core.run_dataset.writer import batch_ranks, top_indices

SPECIAL = np.array([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf, 3e-39, -3e-39], np.float32)


def _stable(values: np.ndarray) -> np.ndarray:
    clean = np.where(np.isnan(values), -np.inf, values.astype(np.float64))
    return np.argsort(-clean, kind="stable")


def test_ranks_and_top_lists_equal_a_stable_sort_with_ties_and_specials() -> None:
    rng = np.random.default_rng(0)
    for _ in range(40):
        n = int(rng.integers(1, 3000))
        v = rng.choice(SPECIAL, n)
        v = np.where(rng.random(n) < 0.5, rng.standard_normal(n).astype(np.float32), v)
        order = _stable(v)
        want = np.empty(n, np.int32)
        want[order] = np.arange(1, n + 1)
        assert (batch_ranks(v) == want).all()
        k = int(rng.integers(1, n + 1))
        assert (top_indices(v, k) == order[:k]).all()
        ints = rng.integers(0, 5, n)  # the rank-gap order: integers with many ties
        assert (top_indices(ints, k) == _stable(ints)[:k]).all()
