"""The final table's statistics: paired intervals, and a conclusion that follows them."""

from __future__ import annotations

import numpy as np
import pytest

from gmts_core.experiments.compare_stats import (
    CompareStatistics,
    compare_statistics,
    conclusion,
    conclusions,
    points,
)


def _stats(finals: np.ndarray, methods: tuple[str, ...] = ("entropy", "gmts")) -> CompareStatistics:
    start = np.full(finals.shape[2], 0.5)
    return compare_statistics(methods, finals, start, "entropy")


def test_identical_methods_differ_by_exactly_zero() -> None:
    rng = np.random.default_rng(0)
    one = rng.integers(0, 2, size=(3, 30)).astype(np.float64)
    stats = _stats(np.stack([one, one]))
    d = stats.row("gmts").paired_difference
    assert d is not None and (d.mean, d.ci_low, d.ci_high) == (0.0, 0.0, 0.0)
    assert "nothing to separate" in conclusion(stats, "gmts")


@pytest.mark.parametrize("seed", range(6))
def test_the_sentence_follows_the_interval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ent = rng.integers(0, 2, size=(3, 40)).astype(np.float64)
    flips = rng.random((3, 40)) < [0.02, 0.1, 0.3, 0.5, 0.7, 0.9][seed]
    gmts = np.where(flips, 1.0, ent)  # gmts gets right some of what entropy got wrong
    stats = _stats(np.stack([ent, gmts]))
    d = stats.row("gmts").paired_difference
    assert d is not None and d.ci_low <= d.mean <= d.ci_high
    text = conclusion(stats, "gmts")
    assert text.startswith(f"gmts \u2212 entropy: {100 * d.mean:+.1f} points")
    if stats.row("gmts").identical:
        assert "nothing to separate" in text
    elif d.ci_low > 0:
        assert "separable with 3 seeds \u00d7 40 problems" in text and "gmts is better" in text
        assert "not separable" not in text
    else:
        assert "not separable with 3 seeds \u00d7 40 problems" in text
    if not stats.row("gmts").identical:  # every verdict comes with its power statement
        a = stats.row("gmts").advice
        assert a is not None and "Power: " in text and "3.0-point difference 80%" in text
        assert (f"Power: {a.seeds_needed} seeds" in text) if a.seeds_needed else "no number" in text


def test_one_seed_gives_no_verdict() -> None:
    rng = np.random.default_rng(0)
    ent = rng.integers(0, 2, size=(1, 200)).astype(np.float64)
    gmts = np.where(rng.random((1, 200)) < 0.5, 1.0, ent)  # far better on this run's weights
    stats = _stats(np.stack([ent, gmts]))
    text = conclusion(stats, "gmts")
    assert stats.row("gmts").paired_difference.ci_low > 0  # type: ignore[union-attr]
    assert "no verdict" in text and "separable" not in text and "better" not in text
    assert "this run's weights" in text and not stats.verdicts_allowed()


def test_points_keep_the_sign_of_a_bound_just_below_zero() -> None:
    assert points(-0.0001) == "\u22120.0" and points(0.0) == "+0.0" and points(0.0001) == "+0.0"


def test_accuracy_intervals_stay_in_unit_range_at_the_edges() -> None:
    finals = np.zeros((2, 2, 10))
    finals[0, 0] = 1.0  # one seed all right, one all wrong: a t-interval leaves [0, 1]
    finals[1, :, :9] = 1.0
    stats = _stats(finals)
    for row in stats.methods:
        assert 0.0 <= row.final_accuracy.ci_low <= row.final_accuracy.ci_high <= 1.0
    assert conclusions(stats) == [conclusion(stats, "gmts")]
    with pytest.raises(ValueError, match="reference"):
        conclusion(stats, "entropy")
