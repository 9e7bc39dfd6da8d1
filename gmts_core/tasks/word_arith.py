"""Natural-language arithmetic for a real instruct model (``smollm2-135m``): questions it can
partly solve, so that sampled groups carry signal, scored by the ``final_number`` reward rule.

Three levels, easiest first (:data:`LEVELS`):

* ``single-digit`` — "What is 3 + 5?" (both operands 1-9, sums only);
* ``two-digit`` — "What is 47 + 38?" (the demo task's two-digit sums, :mod:`.arith`);
* ``word-problem`` — one-step stories over the same two-digit problems, sums and differences:
  "Tom has 47 apples and buys 38 more. How many apples does Tom have now?"

The two-digit levels draw from the demo task's generator (:func:`arith.problem_pool`), so they
share its held-out split (one problem in ten, by a hash of ``a op b``); single-digit problems
are split by the same hash (81 sums: about 8 held out, so they repeat in a held-out draw).
A model answers in prose; the reward reads the number it states (``\\boxed{N}``, "the answer
is N", ``**N**``, else the last number), not a fixed format.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gmts_core.errors import InvalidInputError
from gmts_core.tasks import arith

if TYPE_CHECKING:
    from gmts_core.methods.rewards import RewardVerdict

REWARD_RULE = "final_number"
LEVELS: tuple[str, ...] = ("single-digit", "two-digit", "word-problem")

# (subject, object, story): ``{n}`` the name, ``{a}``/``{b}`` the numbers, ``{o}`` the object
_NAMES = ("Tom", "Sara", "Ali", "Mia", "Ben", "Lena", "Omar", "Zoe")
_OBJECTS = ("apples", "stickers", "marbles", "books", "coins", "pencils", "cards", "shells")
_SUM_STORIES = (
    "{n} has {a} {o} and gets {b} more. How many {o} does {n} have now?",
    "{n} collected {a} {o} on Monday and {b} {o} on Tuesday. How many {o} did {n} collect in all?",
    "There are {a} {o} in one box and {b} {o} in another. How many {o} are there altogether?",
)
_DIFFERENCE_STORIES = (
    "{n} had {a} {o} and gave {b} of them away. How many {o} does {n} have left?",
    "A shelf holds {a} {o}. {n} takes {b} of them. How many {o} are still on the shelf?",
    "{n} has {a} {o} and uses {b}. How many {o} are left?",
)


@dataclass(frozen=True)
class WordProblem:
    """One question, its level and its exact answer (the ``final_number`` reference)."""

    prompt: str
    answer: int
    level: str
    a: int
    b: int
    op: str

    @property
    def reference(self) -> str:
        return str(self.answer)

    def reward(self, answer_text: str) -> RewardVerdict:
        """Score a model's answer with the ``final_number`` rule."""
        # the reward rules live in gmts_core.methods, which imports torch: the task's problems and
        # prompts are read without it (the CLI's help, the UI's first page)
        from gmts_core.methods.rewards import compute_reward

        return compute_reward(REWARD_RULE, answer_text, self.reference)


def _single_digit_pool(split: str) -> list[tuple[int, int, str]]:
    pairs = [(a, b, "+") for a in range(1, 10) for b in range(1, 10)]
    return [p for p in pairs if arith.split_of(*p) == split]


def _question(a: int, b: int, op: str, level: str, rng: random.Random) -> str:
    if level != "word-problem":
        return f"What is {a} {op} {b}?"
    story = rng.choice(_SUM_STORIES if op == "+" else _DIFFERENCE_STORIES)
    return story.format(n=rng.choice(_NAMES), o=rng.choice(_OBJECTS), a=a, b=b)


def make_word_problem(a: int, b: int, op: str, level: str, seed: int = 0) -> WordProblem:
    """The question of ``a op b`` at ``level`` (a word problem's story is drawn by ``seed``)."""
    if level not in LEVELS:
        raise InvalidInputError(f"unknown level {level!r}; valid: {', '.join(LEVELS)}")
    rng = random.Random(f"word-arith:{a}{op}{b}:{seed}")
    answer = a + b if op == "+" else a - b
    return WordProblem(_question(a, b, op, level, rng), answer, level, a, b, op)


def generate_word_problems(
    n: int, seed: int = 0, split: str = "train", levels: tuple[str, ...] = LEVELS
) -> list[WordProblem]:
    """``n`` problems of ``split``, the levels in turn (easiest first: problem ``i`` has level
    ``levels[i % len(levels)]``), drawn by a seeded generator (same seed, same problems)."""
    if n < 0:
        raise InvalidInputError(f"n must be >= 0, got {n}")
    unknown = [lv for lv in levels if lv not in LEVELS]
    if unknown or not levels:
        raise InvalidInputError(f"unknown levels {unknown}; valid: {', '.join(LEVELS)}")
    rng = random.Random(f"word-arith:{split}:{seed}")
    sums = [p for p in arith.problem_pool(split) if p[2] == "+"]
    pools = {
        "single-digit": _single_digit_pool(split),
        "two-digit": sums,
        "word-problem": list(arith.problem_pool(split)),
    }
    out = []
    for i in range(n):
        level = levels[i % len(levels)]
        a, b, op = rng.choice(pools[level])
        out.append(make_word_problem(a, b, op, level, seed))
    return out
