"""Group advantages against their textbook formulas."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from gmts_core.errors import UnknownNameError
from gmts_core.methods.advantages import GRPO_EPS, compute_advantages, list_advantages


def naive(rewards: list[float], mode: str) -> list[float]:
    g = len(rewards)
    mean = sum(rewards) / g
    if mode == "grpo":
        std = (sum((r - mean) ** 2 for r in rewards) / (g - 1)) ** 0.5  # sample std, as TRL
        return [(r - mean) / (std + GRPO_EPS) for r in rewards]
    if mode == "dr_grpo":
        return [r - mean for r in rewards]
    return [r - (sum(rewards) - r) / (g - 1) for r in rewards]  # rloo


def test_registry_lists_the_three_estimators() -> None:
    assert set(list_advantages()) == {"grpo", "dr_grpo", "rloo"}


@pytest.mark.parametrize("mode", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("rewards", [[1, 0, 0, 1], [1, 0, 0, 0, 0, 0, 0, 0], [0.3, -2.0, 5.5]])
def test_matches_the_formula(mode: str, rewards: list[float]) -> None:
    got = compute_advantages(torch.tensor(rewards), mode)
    assert got.dtype == torch.float64 and got.shape == (len(rewards),)
    assert_close(got, torch.tensor(naive(rewards, mode), dtype=torch.float64))


def test_known_values() -> None:
    # one correct answer in four: mean 0.25, sample std 0.5
    assert_close(
        compute_advantages(torch.tensor([1.0, 0, 0, 0]), "grpo"),
        torch.tensor([0.75, -0.25, -0.25, -0.25], dtype=torch.float64) / (0.5 + GRPO_EPS),
    )
    assert_close(
        compute_advantages(torch.tensor([1.0, 0, 0, 0]), "rloo"),
        torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3], dtype=torch.float64),
    )


@pytest.mark.parametrize("mode", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, 0.7, -3.3])
def test_equal_rewards_give_exact_zeros(mode: str, value: float) -> None:
    """A zero-signal group is exactly zero, even where r - mean(r) rounds (e.g. 0.1)."""
    got = compute_advantages(torch.full((3,), value, dtype=torch.float64), mode)
    assert bool((got == 0).all())


@pytest.mark.parametrize("mode", ["grpo", "dr_grpo", "rloo"])
def test_group_of_one_has_no_signal(mode: str) -> None:
    assert compute_advantages(torch.tensor([1.0]), mode).tolist() == [0.0]


@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=12))
@settings(max_examples=60, deadline=None)
def test_centered_and_ordered(rewards: list[float]) -> None:
    for mode in ("grpo", "dr_grpo", "rloo"):
        a = compute_advantages(torch.tensor(rewards, dtype=torch.float64), mode)
        assert abs(float(a.sum())) < 1e-6 * max(1.0, float(a.abs().max()) * len(rewards))
        r = torch.tensor(rewards, dtype=torch.float64)
        i, j = int(r.argmax()), int(r.argmin())
        assert a[i] >= a[j]  # a better answer never gets a lower advantage


def test_unknown_mode_lists_valid() -> None:
    with pytest.raises(UnknownNameError, match="dr_grpo.*grpo.*rloo"):
        compute_advantages(torch.tensor([1.0, 0.0]), "ppo")
