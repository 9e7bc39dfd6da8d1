"""The paired gain between two evaluations of the same problems, and its bootstrap interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gmts_core.errors import InvalidInputError
from gmts_core.experiments.gain import paired_gain


def test_identical_evaluations_give_exactly_zero() -> None:
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5]
    g = paired_gain(scores, scores)
    assert (g.gain, g.low, g.high) == (0.0, 0.0, 0.0) and g.num_problems == 6


@pytest.mark.parametrize("size", [1, 7, 64, 200, 1000])
@pytest.mark.parametrize("draw", range(4))
def test_gain_is_the_mean_paired_difference_inside_its_interval(size: int, draw: int) -> None:
    rng = np.random.default_rng(1000 * size + draw)
    p_before, p_after = rng.uniform(0, 1, size=2)
    before = (rng.uniform(size=size) < p_before).astype(float)
    after = (rng.uniform(size=size) < p_after).astype(float)
    g = paired_gain(before.tolist(), after.tolist())
    assert g.gain == pytest.approx(float(np.mean(after - before)), abs=1e-12)
    assert -1.0 <= g.low <= g.gain <= g.high <= 1.0


def test_all_problems_fixed_gives_a_gain_of_one() -> None:
    g = paired_gain([0.0] * 50, [1.0] * 50)
    assert (g.gain, g.low, g.high) == (1.0, 1.0, 1.0)


def test_pairing_narrows_the_interval_when_problems_share_their_difficulty() -> None:
    # the same problems right and wrong before and after, plus 20 of 200 fixed: the paired
    # interval sees only the 20 changes, an unpaired one would see all the spread
    before = [1.0] * 100 + [0.0] * 100
    after = [1.0] * 120 + [0.0] * 80
    g = paired_gain(before, after)
    assert g.gain == pytest.approx(0.1)
    assert g.low > 0.05  # the 20 changes all go one way
    unpaired_half_width = 1.96 * math.sqrt(2 * 0.25 / 200)
    assert g.high - g.low < unpaired_half_width


def test_large_sample_interval_matches_the_normal_approximation() -> None:
    rng = np.random.default_rng(7)
    before = (rng.uniform(size=2000) < 0.5).astype(float)
    after = (rng.uniform(size=2000) < 0.6).astype(float)
    g = paired_gain(before.tolist(), after.tolist())
    diff = after - before
    half = 1.959964 * diff.std(ddof=1) / math.sqrt(diff.size)
    assert (g.high - g.low) / 2 == pytest.approx(half, rel=0.1)


def test_mismatched_lists_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="equal"):
        paired_gain([1.0, 0.0], [1.0])
    with pytest.raises(InvalidInputError, match="equal"):
        paired_gain([], [])
