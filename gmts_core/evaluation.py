"""Held-out accuracy of a policy, and prompt batches drawn from the demo task.

Evaluation samples every problem's answer(s) in as few ``generate`` calls as possible:
prompts are grouped by token length, so no padding is ever needed (every prompt of the
arithmetic task has the same length, so a whole evaluation set is one batch).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from gmts_core.analysis import encode_prompt
from gmts_core.errors import InvalidInputError
from gmts_core.rewards import compute_reward
from gmts_core.rl import RLPrompt
from gmts_core.sampling import _RNG_LOCK, SamplingConfig, _eos_ids, _trim
from gmts_core.tasks import arith

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy,
            "num_problems": self.num_problems,
            "num_answers": self.num_answers,
            "temperature": self.temperature,
        }


def demo_batch(n: int, seed: int, split: str = "train") -> list[RLPrompt]:
    """``n`` prompts of the demo arithmetic task with their references (numeric reward)."""
    return [
        RLPrompt(p.prompt, p.reference, arith.REWARD_RULE)
        for p in arith.generate_problems(n, seed=seed, split=split)
    ]


def heldout_problems(n: int = DEFAULT_EVAL_PROBLEMS, seed: int = 0) -> list[RLPrompt]:
    """A fixed evaluation set: ``n`` problems of the demo task's held-out split."""
    return demo_batch(n, seed=seed, split="heldout")


@torch.no_grad()
def _sample_same_length(
    model: Any, tokenizer: Any, prompts: list[list[int]], config: SamplingConfig
) -> list[list[int]]:
    """``num_samples`` answers for each prompt; all prompts have the same length."""
    device = next(model.parameters()).device
    ids = torch.tensor(prompts, device=device).repeat_interleave(config.num_samples, 0)  # (B*S, P)
    kwargs: dict[str, Any] = {
        "max_new_tokens": config.max_new_tokens,
        "do_sample": config.temperature > 0,
        "pad_token_id": tokenizer.pad_token_id,
        "attention_mask": torch.ones_like(ids),
    }
    if config.temperature > 0:
        kwargs.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
    with _RNG_LOCK, torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(config.seed)
        out = model.generate(ids, **kwargs)  # (B*S, P + T)
    eos = _eos_ids(model, tokenizer)
    return [_trim(row, eos).token_ids for row in out[:, len(prompts[0]) :].tolist()]


def evaluate_accuracy(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    temperature: float = 1.0,
    samples_per_problem: int = 1,
    max_new_tokens: int = 48,
    seed: int = 0,
    reward_kind: str = arith.REWARD_RULE,
    batch_size: int = 512,
) -> EvalResult:
    """Mean reward of ``model``'s answers on ``problems``; temperature 0 is greedy decoding.

    ``model`` is any causal LM (a :class:`~gmts_core.policy.TrainablePolicy`'s ``.model``
    or a base model). The same ``seed`` gives the same answers for the same weights.
    """
    if not problems:
        raise InvalidInputError("evaluation needs at least one problem")
    if samples_per_problem < 1:
        raise InvalidInputError("samples_per_problem must be >= 1")
    encoded = [encode_prompt(tokenizer, p.prompt, chat_template=False) for p in problems]
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, ids in enumerate(encoded):
        by_length[len(ids)].append(i)
    rewards: list[list[float]] = [[] for _ in problems]
    per_batch = max(1, batch_size // samples_per_problem)
    for length, members in sorted(by_length.items()):
        for start in range(0, len(members), per_batch):
            chunk = members[start : start + per_batch]
            config = SamplingConfig(
                samples_per_problem, temperature, 1.0, 0, max_new_tokens, seed + length + start
            )
            answers = _sample_same_length(model, tokenizer, [encoded[i] for i in chunk], config)
            for j, ans in enumerate(answers):
                i = chunk[j // samples_per_problem]
                text = tokenizer.decode(ans, skip_special_tokens=True)
                rewards[i].append(compute_reward(reward_kind, text, problems[i].reference).reward)
    per_problem = [statistics.fmean(r) for r in rewards]
    return EvalResult(
        accuracy=statistics.fmean(per_problem),
        num_problems=len(problems),
        num_answers=len(problems) * samples_per_problem,
        temperature=temperature,
        per_problem=per_problem,
    )
