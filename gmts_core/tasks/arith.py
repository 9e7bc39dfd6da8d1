"""The demo task: two-digit addition and subtraction with short worked solutions and fork points.

A problem is a prompt such as ``"Q: 47+38=?\\nA:"``; its reference solution works column by
column and ends with the final answer, which the project's ``numeric`` reward rule extracts as
the last number in the text::

    Q: 47+38=?          A: 7+8=15 carry 1, 4+3+1=8, answer 85
    Q: 52-37=?          A: 12-7=5 borrow 1, 5-3-1=1, answer 15
    Q: 23+14=?          A: 3+4=7, 2+1=3, answer 37

*Fork points* are the character spans of a solution where a plausible mistake exists: the
intermediate results (an arithmetic slip) and, when the units column carries or borrows, the
decision to write the carry down (a forgotten carry) and the carried term in the tens column (a
carry written down but never added). :func:`find_fork_spans` locates them in any text of this
format, including answers sampled from a model, so token statistics can be compared with them.

A flawed solution (:func:`flawed_solution`) makes exactly one such mistake and is consistent
after it, as a person's would be. The demo model is trained on a mix of correct and flawed
solutions, so its uncertainty sits at the fork points.

The held-out split is fixed by a hash of the problem's text, so it is disjoint from the training
split whatever the seed.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from gmts_core.errors import InvalidInputError

if TYPE_CHECKING:
    from gmts_core.methods.rewards import RewardVerdict

Split = Literal["train", "heldout"]
SPLITS: tuple[str, ...] = ("train", "heldout")
OPS: tuple[str, ...] = ("+", "-")
FLAW_KINDS: tuple[str, ...] = ("forgot_carry", "carry_not_added", "units_slip", "tens_slip")
HELDOUT_BUCKETS = 10  # one problem in ten is held out
REWARD_RULE = "numeric"

# One solution in the task's format; fork spans are built from these groups.
_SOLUTION_RE = re.compile(
    r"^ (?P<u1>\d+)(?P<op>[+-])(?P<u2>\d+)=(?P<ures>\d+)"
    r"(?P<mark> (?:carry|borrow) \d+)?(?P<comma>,) "
    r"(?P<t1>\d+)(?P=op)(?P<t2>\d+)(?P<tcarry>[+-]\d+)?(?P<eq>=)(?P<tres>-?\d+)"
    r", answer (?P<ans>-?\d+)"
)
_PROMPT_RE = re.compile(r"^Q: (\d+)([+-])(\d+)=\?\nA:$")


@dataclass(frozen=True)
class ArithProblem:
    """One problem: prompt text, reference solution, final answer and fork-point spans.

    ``fork_spans`` are ``(start, end)`` character offsets into ``solution`` (end exclusive).
    ``solution`` starts with a space and ends with the final answer; a model emits it right
    after the prompt and then stops with its end-of-sequence token.
    """

    a: int
    b: int
    op: str
    prompt: str
    solution: str
    answer: int
    fork_spans: tuple[tuple[int, int], ...]

    @property
    def reference(self) -> str:
        """The reference for the ``numeric`` reward rule."""
        return str(self.answer)

    @property
    def needs_carry(self) -> bool:
        """True when the units column carries (addition) or borrows (subtraction)."""
        return needs_carry(self.a, self.b, self.op)

    @property
    def split(self) -> str:
        return split_of(self.a, self.b, self.op)

    def reward(self, answer_text: str) -> RewardVerdict:
        """Score a model's answer with the ``numeric`` rule against this problem's answer."""
        # the reward rules live in gmts_core.methods, which imports torch: the task's problems and
        # prompts are read without it (the CLI's help, the UI's first page)
        from gmts_core.methods.rewards import compute_reward

        return compute_reward(REWARD_RULE, answer_text, self.reference)

    def fork_spans_in(self, text: str) -> tuple[tuple[int, int], ...]:
        """Fork-point spans of ``text`` (e.g. a sampled answer) for this problem."""
        return find_fork_spans(text, self.needs_carry)


def needs_carry(a: int, b: int, op: str) -> bool:
    """True when the units column of ``a op b`` carries (``+``) or borrows (``-``)."""
    return (a % 10 + b % 10 >= 10) if op == "+" else (a % 10 < b % 10)


def _check(a: int, b: int, op: str) -> None:
    if op not in OPS:
        raise InvalidInputError(f"operator must be one of {OPS}, got {op!r}")
    if not (10 <= a <= 99 and 10 <= b <= 99):
        raise InvalidInputError(f"operands must have two digits, got {a} and {b}")
    if op == "-" and a <= b:
        raise InvalidInputError(f"subtraction needs a > b, got {a}-{b}")


def format_prompt(a: int, b: int, op: str) -> str:
    """The prompt for ``a op b``, e.g. ``"Q: 47+38=?\\nA:"``."""
    return f"Q: {a}{op}{b}=?\nA:"


def parse_prompt(prompt: str) -> tuple[int, int, str]:
    """``(a, b, op)`` of a prompt made by :func:`format_prompt`."""
    match = _PROMPT_RE.match(prompt)
    if match is None:
        raise InvalidInputError(f"not a prompt of the arithmetic task: {prompt!r}")
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    _check(a, b, op)
    return a, b, op


def _slipped(value: int, slip: int, low: int, high: int) -> int:
    """``value + slip``, or ``value - slip`` when that would leave ``[low, high]``."""
    return value + slip if low <= value + slip <= high else value - slip


def _render(a: int, b: int, op: str, flaw: str | None, slip: int = 1) -> str:
    """The worked solution of ``a op b``: correct if ``flaw`` is None, else with that mistake."""
    au, bu, at, bt = a % 10, b % 10, a // 10, b // 10
    carry = needs_carry(a, b, op)
    write_mark = carry and flaw != "forgot_carry"
    add_carry = write_mark and flaw != "carry_not_added"
    if op == "+":
        top, ures = au, au + bu
        tres = at + bt + int(add_carry)
    else:
        top = au + 10 if carry else au  # a borrowed ten joins the units digit
        ures = top - bu
        tres = at - bt - int(add_carry)
    if flaw == "units_slip":  # stay on the same side of 10 so the carry decision still holds
        ures = _slipped(ures, slip, 10, 19) if ures >= 10 else _slipped(ures, slip, 0, 9)
    if flaw == "tens_slip":
        tres = _slipped(tres, slip, 0, 19)
    mark = f" {'carry' if op == '+' else 'borrow'} 1" if write_mark else ""
    tcarry = f"{op}1" if add_carry else ""
    answer = tres * 10 + ures % 10
    return f" {top}{op}{bu}={ures}{mark}, {at}{op}{bt}{tcarry}={tres}, answer {answer}"


def solve(a: int, b: int, op: str) -> int:
    """The exact result of ``a op b``."""
    _check(a, b, op)
    return a + b if op == "+" else a - b


def reference_solution(a: int, b: int, op: str) -> str:
    """The correct worked solution of ``a op b``."""
    _check(a, b, op)
    return _render(a, b, op, None)


def applicable_flaws(a: int, b: int, op: str) -> tuple[str, ...]:
    """The mistakes one can make on ``a op b`` (carry mistakes need a carry or a borrow)."""
    return FLAW_KINDS if needs_carry(a, b, op) else ("units_slip", "tens_slip")


def flawed_solution(a: int, b: int, op: str, flaw: str, slip: int = 1) -> str:
    """A solution of ``a op b`` with the one mistake ``flaw``, consistent after it.

    ``slip`` (+1 or -1) is the direction of an arithmetic slip; it is flipped where it would
    change the shape of the solution (a units result crossing 10, a negative tens result).
    """
    _check(a, b, op)
    if flaw not in applicable_flaws(a, b, op):
        raise InvalidInputError(
            f"flaw {flaw!r} does not apply to {a}{op}{b}; valid: {applicable_flaws(a, b, op)}"
        )
    if slip not in (1, -1):
        raise InvalidInputError(f"slip must be +1 or -1, got {slip}")
    return _render(a, b, op, flaw, slip)


def find_fork_spans(text: str, carries: bool) -> tuple[tuple[int, int], ...]:
    """Character spans of the fork points in a solution ``text`` of this task's format.

    Always: the units result and the tens result (where an arithmetic slip is possible). When
    the problem ``carries`` (a carry or a borrow): the decision to write it down (the
    ``" carry 1"`` mark, or the comma written in its place) and the carried term of the tens
    column (``"+1"``, or the ``"="`` written in its place). Text that does not follow the
    format (a malformed answer) has no fork spans.
    """
    match = _SOLUTION_RE.match(text)
    if match is None:
        return ()
    spans = [match.span("ures")]
    if carries:
        spans.append(match.span("mark") if match.group("mark") else match.span("comma"))
        spans.append(match.span("tcarry") if match.group("tcarry") else match.span("eq"))
    spans.append(match.span("tres"))
    return tuple(sorted(spans))


def fork_token_mask(token_texts: list[str], spans: tuple[tuple[int, int], ...]) -> list[bool]:
    """For each token (texts that concatenate to the solution), whether it overlaps a span."""
    mask, pos = [], 0
    for piece in token_texts:
        start, end = pos, pos + len(piece)
        mask.append(any(s < end and start < e for s, e in spans) if piece else False)
        pos = end
    return mask


def split_of(a: int, b: int, op: str) -> str:
    """``"heldout"`` for one problem in ``HELDOUT_BUCKETS`` (by a hash of its text), else train."""
    digest = hashlib.sha256(f"{a}{op}{b}".encode()).digest()
    return "heldout" if digest[0] % HELDOUT_BUCKETS == 0 else "train"


@lru_cache(maxsize=len(SPLITS))
def problem_pool(split: str) -> tuple[tuple[int, int, str], ...]:
    """Every ``(a, b, op)`` of a split, in a fixed order."""
    if split not in SPLITS:
        raise InvalidInputError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    everything = [(a, b, "+") for a in range(10, 100) for b in range(10, 100)]
    everything += [(a, b, "-") for a in range(10, 100) for b in range(10, a)]
    return tuple(p for p in everything if split_of(*p) == split)


def make_problem(a: int, b: int, op: str) -> ArithProblem:
    """The :class:`ArithProblem` for ``a op b`` with its reference solution and fork spans."""
    solution = reference_solution(a, b, op)
    return ArithProblem(
        a=a,
        b=b,
        op=op,
        prompt=format_prompt(a, b, op),
        solution=solution,
        answer=solve(a, b, op),
        fork_spans=find_fork_spans(solution, needs_carry(a, b, op)),
    )


def generate_problems(n: int, seed: int = 0, split: str = "train") -> list[ArithProblem]:
    """``n`` problems of ``split``, drawn by a seeded generator (same seed, same problems).

    Problems are distinct while ``n`` is at most the size of the split (about 10,900 train,
    1,200 held-out), and drawn with replacement beyond that.
    """
    if n < 0:
        raise InvalidInputError(f"n must be >= 0, got {n}")
    pool = problem_pool(split)
    rng = random.Random(f"arith:{split}:{seed}")
    picks = rng.sample(pool, n) if n <= len(pool) else rng.choices(pool, k=n)
    return [make_problem(*p) for p in picks]


@dataclass(frozen=True)
class ExamplePrompt:
    """A prompt offered to people in the UI and the docs, with its reference answer."""

    label: str
    prompt: str
    reference: str
    note: str


def example_prompts() -> list[ExamplePrompt]:
    """A handful of held-out prompts: easy, hard, and ones where sampled groups split."""
    chosen = [
        ("easy", 71, 23, "+", "no carry: the model is almost always right"),
        ("carry", 24, 68, "+", "a carry: groups of 8 usually split between right and wrong"),
        ("borrow", 83, 65, "-", "a borrow: groups usually split"),
        ("hard", 68, 69, "+", "a carry into a three-digit answer"),
        ("easy subtraction", 58, 32, "-", "no borrow"),
    ]
    return [
        ExamplePrompt(label, format_prompt(a, b, op), str(solve(a, b, op)), note)
        for label, a, b, op, note in chosen
    ]
