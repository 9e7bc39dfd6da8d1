"""The arithmetic demo task: seeded generator, disjoint splits, fork points, the verifier."""

from __future__ import annotations

import pytest

from gmts_core.errors import InvalidInputError
from gmts_core.methods.rewards import compute_reward
from gmts_core.tasks.arith import (
    FLAW_KINDS,
    applicable_flaws,
    example_prompts,
    find_fork_spans,
    flawed_solution,
    fork_token_mask,
    generate_problems,
    make_problem,
    parse_prompt,
    problem_pool,
    split_of,
)


def test_generator_is_seeded_and_deterministic() -> None:
    first = generate_problems(50, seed=3, split="train")
    assert first == generate_problems(50, seed=3, split="train")
    assert first != generate_problems(50, seed=4, split="train")
    assert len({p.prompt for p in first}) == 50  # distinct while n <= pool size


def test_heldout_split_is_disjoint_from_training() -> None:
    train, heldout = set(problem_pool("train")), set(problem_pool("heldout"))
    assert not train & heldout
    assert 0.05 < len(heldout) / (len(train) + len(heldout)) < 0.15
    drawn = generate_problems(200, seed=0, split="heldout")
    assert all(p.split == "heldout" for p in drawn)
    assert all(split_of(p.a, p.b, p.op) == "train" for p in generate_problems(200, 1, "train"))


def test_unknown_split_lists_valid_ones() -> None:
    with pytest.raises(InvalidInputError, match="heldout"):
        generate_problems(3, split="test")


@pytest.mark.parametrize(
    ("a", "b", "op", "solution"),
    [
        (47, 38, "+", " 7+8=15 carry 1, 4+3+1=8, answer 85"),
        (86, 59, "+", " 6+9=15 carry 1, 8+5+1=14, answer 145"),
        (23, 14, "+", " 3+4=7, 2+1=3, answer 37"),
        (52, 37, "-", " 12-7=5 borrow 1, 5-3-1=1, answer 15"),
        (52, 47, "-", " 12-7=5 borrow 1, 5-4-1=0, answer 5"),
        (68, 25, "-", " 8-5=3, 6-2=4, answer 43"),
    ],
)
def test_reference_solutions_are_right(a: int, b: int, op: str, solution: str) -> None:
    problem = make_problem(a, b, op)
    assert problem.solution == solution
    assert problem.prompt == f"Q: {a}{op}{b}=?\nA:"
    assert parse_prompt(problem.prompt) == (a, b, op)
    assert problem.reward(problem.solution).reward == 1.0


def test_every_reference_solution_in_the_pools_is_correct() -> None:
    for a, b, op in problem_pool("heldout"):
        problem = make_problem(a, b, op)
        assert problem.answer == (a + b if op == "+" else a - b)
        assert compute_reward("numeric", problem.solution, problem.reference).reward == 1.0


def test_fork_points_cover_carry_and_intermediate_results() -> None:
    problem = make_problem(47, 38, "+")
    pieces = [problem.solution[s:e] for s, e in problem.fork_spans]
    assert pieces == ["15", " carry 1", "+1", "8"]
    no_carry = make_problem(23, 14, "+")
    assert [no_carry.solution[s:e] for s, e in no_carry.fork_spans] == ["7", "3"]
    borrow = make_problem(52, 37, "-")
    assert [borrow.solution[s:e] for s, e in borrow.fork_spans] == ["5", " borrow 1", "-1", "1"]


def test_fork_points_found_in_flawed_answers_where_they_diverge() -> None:
    forgot = flawed_solution(47, 38, "+", "forgot_carry")
    assert forgot == " 7+8=15, 4+3=7, answer 75"
    assert [forgot[s:e] for s, e in find_fork_spans(forgot, True)] == ["15", ",", "=", "7"]
    assert find_fork_spans("I think it is 85", True) == ()


@pytest.mark.parametrize("a,b,op", [(47, 38, "+"), (99, 99, "+"), (52, 37, "-"), (23, 14, "+")])
def test_each_flaw_is_wrong_but_well_formed(a: int, b: int, op: str) -> None:
    problem = make_problem(a, b, op)
    for flaw in applicable_flaws(a, b, op):
        for slip in (1, -1):
            text = flawed_solution(a, b, op, flaw, slip)
            assert problem.reward(text).verdict == "incorrect", (flaw, text)
            assert len(problem.fork_spans_in(text)) == len(problem.fork_spans)
    assert len(applicable_flaws(23, 14, "+")) < len(FLAW_KINDS)
    with pytest.raises(InvalidInputError):
        flawed_solution(23, 14, "+", "forgot_carry")


def test_fork_token_mask_marks_overlapping_tokens() -> None:
    pieces = [" ", "7", "+", "8", "=", "1", "5", " ", "carry", " ", "1", ","]
    mask = fork_token_mask(pieces, ((5, 7), (7, 15)))
    assert mask == [False] * 5 + [True] * 6 + [False]


def test_verifier_on_right_wrong_and_malformed_answers() -> None:
    problem = make_problem(47, 38, "+")
    assert problem.reward(" 7+8=15 carry 1, 4+3+1=8, answer 85").verdict == "correct"
    assert problem.reward(" 7+8=15, 4+3=7, answer 75").verdict == "incorrect"
    assert problem.reward(" 7+8=15 carry 1, 4+3+1=8, answer").verdict == "incorrect"  # last is 8
    assert problem.reward(" carry carry answer").verdict == "no answer found"
    assert problem.reward("").reward == 0.0


def test_invalid_problems_are_rejected() -> None:
    for args in [(5, 38, "+"), (47, 100, "+"), (37, 52, "-"), (47, 38, "*")]:
        with pytest.raises(InvalidInputError):
            make_problem(*args)
    with pytest.raises(InvalidInputError):
        parse_prompt("What is 2+2?")


def test_example_prompts_are_held_out_and_well_formed() -> None:
    examples = example_prompts()
    assert len(examples) >= 3
    assert {"easy", "hard"} <= {e.label for e in examples}
    for example in examples:
        a, b, op = parse_prompt(example.prompt)
        assert split_of(a, b, op) == "heldout"
        assert example.reference == str(make_problem(a, b, op).answer)
