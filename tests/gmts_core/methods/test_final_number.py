"""The ``final_number`` reward rule: the number a natural-language answer states, in the forms
a small instruct model writes (boxed, "the answer is N", bold, "= N", the last number), checked
as properties on generated answers and on answers SmolLM2-135M-Instruct wrote."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gmts_core.methods.final_number import extract_stated_number
from gmts_core.methods.rewards import compute_reward, list_rewards

FORMS = {
    "boxed": "So we get \\boxed{{{n}}}.",
    "answer is": "The answer is {n}.",
    "answer colon": "Answer: {n}",
    "answer is a sum": "The answer is {a} + {b} = {n}.",
    "bold": "Tom has **{n}** apples.",
    "bold with unit": "So the total is **{n} apples**.",
    "equals": "{a} + {b} = {n}",
    "last number": "After buying more, Tom has {n} apples",
    "latex dollars": "the final answer is ${n}$.",
}

numbers = st.integers(min_value=-10_000, max_value=10_000)


def test_registered() -> None:
    assert "final_number" in list_rewards()


@given(n=numbers, a=numbers, b=numbers, form=st.sampled_from(sorted(FORMS)))
def test_each_form_gives_its_number(n: int, a: int, b: int, form: str) -> None:
    preamble = f"Let's think. We start with {a} and add {b}. "  # numbers before never count
    text = preamble + FORMS[form].format(n=n, a=a, b=b)
    assert compute_reward("final_number", text, str(n)).reward == 1.0
    if n != a and n != b:
        assert compute_reward("final_number", text, str(n + 1)).reward == 0.0


@given(n=numbers, later=st.lists(numbers, min_size=1, max_size=4))
def test_a_stated_answer_beats_numbers_written_after_it(n: int, later: list[int]) -> None:
    check = " ".join(f"Check: {x} - {n} = {x - n}." for x in later)
    for stated in (f"The answer is {n}.", f"\\boxed{{{n}}}", f"**{n}**"):
        extracted, _ = extract_stated_number(f"{stated} {check}")
        assert extracted is not None and int(extracted.replace(",", "")) == n


@given(text=st.text(alphabet=st.characters(blacklist_categories=("Nd",)), max_size=200))
def test_no_digits_no_answer(text: str) -> None:
    verdict = compute_reward("final_number", text, "5")
    assert verdict.reward == 0.0
    assert verdict.verdict in ("no answer found", "unparsable", "incorrect")


@pytest.mark.parametrize(
    ("answer", "reference", "reward"),
    [
        # written by SmolLM2-135M-Instruct (Q4_1) to "Tom has 47 apples and buys 38 more..."
        (
            "Let's break this down step by step: 1. Tom has 47 apples. 2. He buys 38 more, so "
            "47 + 38 = 85. So Tom has 85 apples.",
            "85",
            1.0,
        ),
        ("47 + 38 = 174", "85", 0.0),
        ("To solve this, we'll first combine the numerators: 47 + 38 = 85.", "85", 1.0),
        (
            "Tom has 47 - 38 = 4 apples left.\nTom's family has 1 (demonstrates) of 10 apples, "
            "giving a total of 1 bundle of 4 apples.",
            "85",
            0.0,
        ),
        ("The answer is 1,250 dollars.", "1250", 1.0),
        ("The answer is: **-12**", "-12", 1.0),
    ],
)
def test_real_answers(answer: str, reference: str, reward: float) -> None:
    assert compute_reward("final_number", answer, reference).reward == reward
