"""Bounded numbers, reward budgets, math-verify off the main thread, advantages, cancellation."""

from __future__ import annotations

import threading
from fractions import Fraction

import pytest
import torch

from gmts_core.bounds import MAX_ABS_REWARD, MAX_NUMBER_DIGITS, MAX_NUMBER_EXPONENT
from gmts_core.errors import InvalidInputError, LimitExceededError
from gmts_core.methods.advantages import compute_advantages
from gmts_core.methods.rewards import (
    RewardBudget,
    check_reference,
    compute_reward,
    explicit_reward,
    parse_number,
    reward_budget,
)
from gmts_core.progress import Cancelled, CancelToken, cancellable, checkpoint


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e5", Fraction(100_000)),
        ("-2.5e-3", Fraction(-25, 10_000)),
        (f"1e{MAX_NUMBER_EXPONENT}", Fraction(10**MAX_NUMBER_EXPONENT)),
        ("9" * MAX_NUMBER_DIGITS, Fraction(int("9" * MAX_NUMBER_DIGITS))),
        ("1e10000000", None),
        (f"1e{MAX_NUMBER_EXPONENT + 1}", None),
        ("1e-10000000", None),
        ("9" * (MAX_NUMBER_DIGITS + 1), None),
        ("1/1e999999", None),
        ("1_000", None),
        ("٣", None),  # only ASCII digits
        ("1e", None),
        (".", None),
    ],
)
def test_parse_number_is_bounded_and_exact(text: str, value: Fraction | None) -> None:
    assert parse_number(text) == value


def test_numeric_reward_compares_exactly_without_overflow() -> None:
    big = "9" * 99
    assert compute_reward("numeric", f"so {big}", big).verdict == "correct"
    assert compute_reward("numeric", f"so {big}", "1e98").verdict == "incorrect"
    assert compute_reward("numeric", "4" * 400, "5").verdict == "unparsable"
    # exponent references, compared exactly (no float rounding of 23 digits)
    assert compute_reward(
        "numeric", "12345678901234567890123", "1.2345678901234567890123e22"
    ).reward
    assert compute_reward("numeric", "it is 0.5", "5e-1").reward == 1.0


@pytest.mark.parametrize(
    ("kind", "reference"),
    [("numeric", "1e10000000"), ("numeric", "two"), ("regex", "("), ("exact", "x" * 5000)],
)
def test_bad_references_are_refused_before_any_answer(kind: str, reference: str) -> None:
    with pytest.raises(InvalidInputError):
        check_reference(kind, reference)


def test_rewards_beyond_the_bound_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        explicit_reward(MAX_ABS_REWARD * 10)
    with pytest.raises(InvalidInputError):
        explicit_reward(True)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        compute_advantages(torch.tensor([1e308, -1e308], dtype=torch.float64), "grpo")


@pytest.mark.parametrize("mode", ["grpo", "dr_grpo", "rloo"])
def test_advantages_at_the_bound_are_finite_and_ordered(mode: str) -> None:
    r = torch.tensor([MAX_ABS_REWARD, -MAX_ABS_REWARD, 0.0], dtype=torch.float64)
    a = compute_advantages(r, mode)
    assert torch.isfinite(a).all() and a[0] > a[2] > a[1]
    naive = {"grpo": (r - r.mean()) / (r.std() + 1e-4), "dr_grpo": r - r.mean()}
    if mode in naive:
        torch.testing.assert_close(a, naive[mode])


def test_the_regex_budget_covers_the_whole_request() -> None:
    answers = ["a" * 28 + "!"] * 40
    tried = 0
    with reward_budget(0.5, "GMTS_REWARD_BUDGET_S"):
        with pytest.raises(LimitExceededError, match="GMTS_REWARD_BUDGET_S"):
            for a in answers:
                tried += 1
                compute_reward("regex", a, "(a|aa)+$")
    # stopped once 0.5 s of matching was spent: two 0.25 s cut-offs fill it (a third may get
    # what is left), not 40. Counted, not timed: the cut-offs are wall-clock, so the count
    # holds on a loaded machine, where the time spent does not
    assert tried <= 4, tried


def test_budget_timeout_is_what_is_left() -> None:
    b = RewardBudget(1.0)
    b.charge(0.9)
    assert b.timeout(0.25) == pytest.approx(0.1)
    b.charge(0.2)
    with pytest.raises(LimitExceededError):
        b.timeout(0.25)


def test_math_reward_works_in_a_worker_thread_and_times_out_cleanly() -> None:
    pytest.importorskip("math_verify")
    got: dict[str, object] = {}

    def work() -> None:
        got["ok"] = compute_reward("math", "so \\boxed{\\frac{1}{2}}", "0.5")
        with reward_budget(1.0):
            got["tower"] = compute_reward("math", "10^10^10^10^10^10", "1")

    t = threading.Thread(target=work)
    t.start()
    t.join(300)
    assert got["ok"].verdict == "correct"  # type: ignore[attr-defined]
    assert got["tower"].verdict in ("timeout", "incorrect")  # type: ignore[attr-defined]


def test_checkpoint_raises_only_inside_a_cancelled_block() -> None:
    checkpoint()  # no token: nothing happens
    token = CancelToken()
    with cancellable(token):
        checkpoint()
        token.cancel("the client disconnected")
        with pytest.raises(Cancelled, match="disconnected"):
            checkpoint()
    checkpoint()
