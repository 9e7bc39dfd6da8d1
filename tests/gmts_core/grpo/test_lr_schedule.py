"""The learning-rate schedule of a GRPO run: linear warm-up, then the peak or a cosine decay to 0
(each step's rate against the formula written out here, and a real step taking that rate)."""

from __future__ import annotations

import math

import pytest

from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError


def _expected(step: int, peak: float, warmup: int, decay: int) -> float:
    if step <= warmup:
        return peak * step / warmup
    if not decay:
        return peak
    d = min(step - warmup, decay + 1)
    return peak * (1 + math.cos(math.pi * d / (decay + 1))) / 2


@pytest.mark.parametrize(("warmup", "decay"), [(0, 0), (5, 0), (0, 10), (5, 275), (3, 1)])
def test_each_step_has_the_schedules_rate(warmup: int, decay: int) -> None:
    config = RLConfig(learning_rate=2e-4, warmup_steps=warmup, decay_steps=decay)
    steps = range(1, warmup + decay + 20)
    rates = [config.learning_rate_at(s) for s in steps]
    assert rates == pytest.approx([_expected(s, 2e-4, warmup, decay) for s in steps], abs=1e-15)
    if decay:
        decayed = rates[warmup:]
        assert all(a >= b for a, b in zip(decayed, decayed[1:], strict=False))  # never rises
        assert decayed[decay - 1] > 0  # the last decayed step still learns
        assert decayed[decay:] == [0.0] * (len(decayed) - decay)  # then nothing moves
    else:
        assert rates[warmup:] == [2e-4] * (len(rates) - warmup)


def test_a_negative_decay_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="decay_steps"):
        RLConfig(decay_steps=-1).validate()
