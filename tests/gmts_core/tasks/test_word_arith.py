"""The natural-language arithmetic task: levels easiest first, seeded, split like the demo
task, answers exact, each question's own answer rewarded by ``final_number``."""

from __future__ import annotations

import pytest

from gmts_core.errors import InvalidInputError
from gmts_core.tasks import arith
from gmts_core.tasks.word_arith import LEVELS, generate_word_problems, make_word_problem


def test_levels_in_turn_and_answers_exact() -> None:
    problems = generate_word_problems(60, seed=3)
    assert [p.level for p in problems[:3]] == list(LEVELS)
    for p in problems:
        assert p.answer == (p.a + p.b if p.op == "+" else p.a - p.b)
        assert str(p.a) in p.prompt and str(p.b) in p.prompt
        if p.level == "single-digit":
            assert 1 <= p.a <= 9 and 1 <= p.b <= 9 and p.op == "+"
        else:
            assert 10 <= p.a <= 99 and 10 <= p.b <= 99
        if p.level != "word-problem":
            assert p.prompt == f"What is {p.a} {p.op} {p.b}?"
        assert p.reward(f"The answer is {p.answer}.").reward == 1.0
        assert p.reward(f"The answer is {p.answer + 1}.").reward == 0.0


def test_seeded_and_split_by_the_demo_tasks_hash() -> None:
    assert generate_word_problems(30, seed=1) == generate_word_problems(30, seed=1)
    assert generate_word_problems(30, seed=1) != generate_word_problems(30, seed=2)
    for split in ("train", "heldout"):
        for p in generate_word_problems(90, seed=0, split=split):
            assert arith.split_of(p.a, p.b, p.op) == split


def test_word_problems_have_both_operations_and_a_story() -> None:
    problems = generate_word_problems(120, seed=0, levels=("word-problem",))
    assert {p.op for p in problems} == {"+", "-"}
    assert all(p.prompt.endswith("?") and "What is" not in p.prompt for p in problems)
    assert (
        make_word_problem(47, 38, "+", "word-problem", seed=5).prompt
        == make_word_problem(47, 38, "+", "word-problem", seed=5).prompt
    )


def test_bad_arguments_name_the_valid_ones() -> None:
    with pytest.raises(InvalidInputError, match="single-digit"):
        generate_word_problems(3, levels=("hard",))
    with pytest.raises(InvalidInputError, match="n must be"):
        generate_word_problems(-1)
