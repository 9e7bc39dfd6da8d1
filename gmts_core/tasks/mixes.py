"""Task mixes: which problems a training batch of the demo task draws (``CompareConfig.task_mix``).

``default`` draws the arithmetic task's two-digit problems (:func:`arith.generate_problems`), as
every batch always did. ``hard-mix`` replaces half of them (``HARD_SHARE``) by three-digit
additions, a problem beyond the demo model (trained on two digits only; every sum is at least
200, a number its worked solutions never reach), so nearly every such group's answers are all
wrong: a *zero-signal* group, whose GRPO advantages are all 0 and whose tokens no method can
learn from. It is the regime where a selection that ignores the advantage (entropy) can spend
its budget on groups that teach nothing.

The bundled model has no *easy* problems to mix in for the other kind of zero-signal group
(every answer right): sampled at temperature 1 it answers each two-digit problem right about
half the time, and about 1 problem in 200 gets 8 of 8 right. So the zero-signal groups this mix
adds are all-wrong ones.

Each mix is a function ``(n, seed, split) -> [TaskPrompt]`` in the ``TASK_MIXES`` registry;
the same arguments give the same prompts in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import NamedTuple

from gmts_core.registry import Registry
from gmts_core.tasks import arith

DEFAULT_TASK_MIX = "default"
HARD_SHARE = 0.5  # of a hard-mix batch's prompts


class TaskPrompt(NamedTuple):
    """A prompt of the demo task's format with the reference of its ``numeric`` reward."""

    prompt: str
    reference: str
    hard: bool = False  # a problem beyond the demo model (a hard-mix batch's)


MixFn = Callable[[int, int, str], list[TaskPrompt]]
TASK_MIXES: Registry[MixFn] = Registry("task mix")


def task_mix_names() -> list[str]:
    return TASK_MIXES.names()


def mixed_prompts(mix: str, n: int, seed: int = 0, split: str = "train") -> list[TaskPrompt]:
    """``n`` training prompts of the mix ``mix`` (an unknown name lists the valid ones)."""
    return TASK_MIXES.get(mix)(n, seed, split)


@TASK_MIXES.register("default")
def default_mix(n: int, seed: int, split: str) -> list[TaskPrompt]:
    """The arithmetic task's two-digit problems."""
    return [TaskPrompt(p.prompt, p.reference) for p in arith.generate_problems(n, seed, split)]


def hard_problems(n: int, seed: int, split: str) -> list[TaskPrompt]:
    """``n`` three-digit additions of ``split`` (the task's held-out hash rule), seeded."""
    rng = random.Random(f"arith-hard:{split}:{seed}")
    out: list[TaskPrompt] = []
    while len(out) < n:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if arith.split_of(a, b, "+") == split:
            out.append(TaskPrompt(arith.format_prompt(a, b, "+"), str(a + b), hard=True))
    return out


@TASK_MIXES.register("hard-mix")
def hard_mix(n: int, seed: int, split: str) -> list[TaskPrompt]:
    """``round(n * HARD_SHARE)`` three-digit additions among two-digit problems, shuffled."""
    hard = round(n * HARD_SHARE)
    prompts = default_mix(n - hard, seed, split) + hard_problems(hard, seed, split)
    random.Random(f"arith-mix:{split}:{seed}").shuffle(prompts)
    return prompts
