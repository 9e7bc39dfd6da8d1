"""Held-out accuracy of a policy, and prompt batches drawn from the demo task.

Evaluation samples every problem's answer(s) in as few sampling calls as possible, through
:func:`gmts_core.sampling.answers.sample_groups` (prompts share a call; of different token
lengths only where the fused decoding step serves the model).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gmts_core.errors import InvalidInputError
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.knobs import DEFAULT_TEMPERATURE
from gmts_core.methods.rewards import compute_reward
from gmts_core.sampling.answers import SamplingConfig, sample_groups
from gmts_core.stats.tokenization import encode_prompt
from gmts_core.tasks import arith, word_arith
from gmts_core.tasks.mixes import DEFAULT_TASK_MIX, mixed_prompts

DEFAULT_EVAL_PROBLEMS = 200


class Problem(Protocol):
    """Anything with a prompt and a reference (an ArithProblem, an RLPrompt)."""

    @property
    def prompt(self) -> str: ...

    @property
    def reference(self) -> str: ...


@dataclass
class EvalResult:
    """Accuracy = mean reward over every sampled answer of every problem."""

    accuracy: float
    num_problems: int
    num_answers: int
    temperature: float
    per_problem: list[float] = field(default_factory=list)  # mean reward of each problem


def demo_batch(
    n: int, seed: int, split: str = "train", mix: str = DEFAULT_TASK_MIX
) -> list[RLPrompt]:
    """``n`` prompts of the demo arithmetic task with their references (numeric reward), drawn
    by the task mix ``mix`` (:mod:`gmts_core.tasks.mixes`; the default: two-digit problems)."""
    return [
        RLPrompt(p.prompt, p.reference, arith.REWARD_RULE)
        for p in mixed_prompts(mix, n, seed=seed, split=split)
    ]


def word_problem_batch(n: int, seed: int, split: str = "train") -> list[RLPrompt]:
    """``n`` prompts of the word-arithmetic task (:mod:`gmts_core.tasks.word_arith`, the real
    model's task: natural-language questions, the ``final_number`` reward), levels in turn."""
    return [
        RLPrompt(p.prompt, p.reference, word_arith.REWARD_RULE)
        for p in word_arith.generate_word_problems(n, seed=seed, split=split)
    ]


TASK_BATCHES = {"arith": demo_batch, "word_arith": word_problem_batch}
"""A task's batch of ``(n, seed, split)`` prompts, by task name (``PackagedModel.task``)."""
TASK_REWARDS = {"arith": arith.REWARD_RULE, "word_arith": word_arith.REWARD_RULE}
"""A task's reward rule, by task name."""


def heldout_problems(n: int = DEFAULT_EVAL_PROBLEMS, seed: int = 0) -> list[RLPrompt]:
    """A fixed evaluation set: ``n`` problems of the demo task's held-out split."""
    return demo_batch(n, seed=seed, split="heldout")


def evaluate_accuracy(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    temperature: float = DEFAULT_TEMPERATURE,
    samples_per_problem: int = 1,
    max_new_tokens: int = 48,
    seed: int = 0,
    reward_kind: str = arith.REWARD_RULE,
    chat_template: bool = False,
) -> EvalResult:
    """Mean reward of ``model``'s answers on ``problems``; temperature 0 is greedy decoding.
    ``chat_template``: the prompts wrapped in the tokenizer's chat template (an instruct model).

    ``model`` is any causal LM (a :class:`~gmts_core.grpo.policy.TrainablePolicy`'s ``.model``
    or a base model). The same ``seed`` gives the same answers for the same weights. Answers
    are drawn by :func:`gmts_core.sampling.answers.sample_groups` (problems share sampling calls;
    NaN or infinite logits stop it with a clear error).
    """
    if not problems:
        raise InvalidInputError("evaluation needs at least one problem")
    if samples_per_problem < 1:
        raise InvalidInputError("samples_per_problem must be >= 1")
    encoded = [encode_prompt(tokenizer, p.prompt, chat_template=chat_template) for p in problems]
    configs = [
        SamplingConfig(samples_per_problem, temperature, 1.0, 0, max_new_tokens, seed + i)
        for i in range(len(problems))
    ]
    groups = sample_groups(model, tokenizer, encoded, configs)
    rewards: list[list[float]] = []
    for problem, answers in zip(problems, groups, strict=True):
        texts = [tokenizer.decode(a.token_ids, skip_special_tokens=True) for a in answers]
        rewards.append([compute_reward(reward_kind, t, problem.reference).reward for t in texts])
    per_problem = [statistics.fmean(r) for r in rewards]
    return EvalResult(
        accuracy=statistics.fmean(per_problem),
        num_problems=len(problems),
        num_answers=len(problems) * samples_per_problem,
        temperature=temperature,
        per_problem=per_problem,
    )
