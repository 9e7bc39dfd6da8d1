"""Measure a demo model on held-out arithmetic prompts: accuracy, split groups, fork entropy.

For each of ``num_prompts`` held-out problems the model samples a group of ``group_size``
answers at temperature 1 (full distribution: no top-k, no top-p; seeded per problem, batched
by :func:`gmts_core.sampling.answers.sample_groups`) and answers once greedily. Entropies come from
the library's chunked token statistics (:func:`gmts_core.stats.forward.answer_token_stats`).
Reported:

- ``accuracy_t1``: mean ``numeric`` reward over all sampled answers;
- ``accuracy_greedy``: mean reward of the greedy answers;
- ``mixed_group_share``: share of groups whose rewards are not all equal (groups with a
  learning signal under GRPO);
- ``fork_share_top_entropy``: rank every sampled answer token of the whole evaluated set
  (end-of-sequence tokens included) by its Shannon entropy in nats at temperature 1, keep the
  top ``ceil(top_ratio * N)``, and report the share of them that sit at a fork point of the
  task (:func:`gmts_core.tasks.arith.find_fork_spans`); ``fork_share_top_entropy_per_group``
  does the same ranking within each group and averages; ``fork_token_share`` is the share of
  all answer tokens that are fork tokens (the base rate to compare with).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from gmts_core.base_config import DemoEvalConfig as DemoEvalConfig
from gmts_core.sampling.answers import SamplingConfig, sample_groups
from gmts_core.stats.forward import answer_token_stats
from gmts_core.stats.tokenization import encode_prompt
from gmts_core.tasks.arith import ArithProblem, fork_token_mask, generate_problems

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoEvalResult:
    """The demo model's figures on held-out prompts (see the module docstring)."""

    num_prompts: int
    group_size: int
    accuracy_t1: float
    accuracy_greedy: float
    mixed_group_share: float
    fork_share_top_entropy: float
    fork_share_top_entropy_per_group: float
    fork_token_share: float
    mean_answer_tokens: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SampledGroup:
    """One prompt's sampled answers: token ids, texts, rewards, per-token entropies, fork mask."""

    problem: ArithProblem
    token_ids: list[list[int]]
    texts: list[str]
    rewards: list[float]
    entropies: list[list[float]]
    fork_masks: list[list[bool]]


def _prompt_ids(tokenizer: Any, problem: ArithProblem) -> list[int]:
    return encode_prompt(tokenizer, problem.prompt, chat_template=False)


def sample_groups_of(
    model: PreTrainedModel,
    tokenizer: Any,
    problems: list[ArithProblem],
    config: DemoEvalConfig,
) -> list[SampledGroup]:
    """Sample ``config.group_size`` answers to each problem (batched, seeded per problem) and
    annotate every answer token with its entropy and fork flag."""
    prompts = [_prompt_ids(tokenizer, p) for p in problems]
    sampling = [
        dataclasses.replace(config.sampling, seed=config.sampling.seed + i)
        for i in range(len(problems))
    ]
    groups = sample_groups(model, tokenizer, prompts, sampling)
    pairs = [(ids, a.token_ids) for ids, group in zip(prompts, groups, strict=True) for a in group]
    stats = iter(
        answer_token_stats(model, pairs, tokenizer.pad_token_id, config.sampling.temperature)
    )
    out = []
    for problem, group in zip(problems, groups, strict=True):
        answers = [a.token_ids for a in group]
        entropies = [next(stats).stats.entropy.tolist() for _ in answers]
        texts, masks = [], []
        for ans in answers:
            pieces = [tokenizer.decode([tok], skip_special_tokens=True) for tok in ans]
            text = "".join(pieces)
            texts.append(text)
            masks.append(fork_token_mask(pieces, problem.fork_spans_in(text)))
        rewards = [problem.reward(text).reward for text in texts]
        out.append(SampledGroup(problem, answers, texts, rewards, entropies, masks))
    return out


def greedy_rewards_of(
    model: PreTrainedModel,
    tokenizer: Any,
    problems: list[ArithProblem],
    config: DemoEvalConfig,
) -> list[float]:
    """The reward of each problem's greedy answer."""
    prompts = [_prompt_ids(tokenizer, p) for p in problems]
    greedy = SamplingConfig(1, 0.0, max_new_tokens=config.sampling.max_new_tokens, seed=0)
    groups = sample_groups(model, tokenizer, prompts, [greedy] * len(problems))
    return [
        p.reward(tokenizer.decode(g[0].token_ids, skip_special_tokens=True)).reward
        for p, g in zip(problems, groups, strict=True)
    ]


def top_entropy_fork_share(entropies: list[float], forks: list[bool], ratio: float) -> float:
    """Share of the top ``ceil(ratio * N)`` tokens by entropy that are fork tokens.

    Ties are broken by position in the list, as the project's selection does.
    """
    if not entropies:
        return float("nan")
    k = math.ceil(ratio * len(entropies))
    order = sorted(range(len(entropies)), key=lambda i: (-entropies[i], i))[:k]
    return sum(forks[i] for i in order) / k


def summarize(groups: list[SampledGroup], greedy_rewards: list[float], ratio: float) -> dict:
    """The :class:`DemoEvalResult` fields computed from sampled groups and greedy rewards."""
    flat = lambda rows: [x for row in rows for x in row]  # noqa: E731
    entropies = flat(flat([g.entropies for g in groups]))
    forks = flat(flat([g.fork_masks for g in groups]))
    rewards = flat([g.rewards for g in groups])
    per_group = [
        top_entropy_fork_share(flat(g.entropies), flat(g.fork_masks), ratio) for g in groups
    ]
    return {
        "accuracy_t1": sum(rewards) / len(rewards),
        "accuracy_greedy": sum(greedy_rewards) / len(greedy_rewards),
        "mixed_group_share": sum(len(set(g.rewards)) > 1 for g in groups) / len(groups),
        "fork_share_top_entropy": top_entropy_fork_share(entropies, forks, ratio),
        "fork_share_top_entropy_per_group": sum(per_group) / len(per_group),
        "fork_token_share": sum(forks) / len(forks),
        "mean_answer_tokens": len(entropies) / len(rewards),
    }


def evaluate_demo_model(
    model: PreTrainedModel,
    tokenizer: Any,
    config: DemoEvalConfig | None = None,
    problems: list[ArithProblem] | None = None,
) -> DemoEvalResult:
    """Evaluate ``model`` on held-out problems (drawn with ``config.sampling.seed`` unless
    given)."""
    config = config or DemoEvalConfig()
    problems = problems or generate_problems(config.num_prompts, config.sampling.seed, "heldout")
    model.eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.num_threads)
    try:
        groups = sample_groups_of(model, tokenizer, problems, config)
        greedy_rewards = greedy_rewards_of(model, tokenizer, problems, config)
    finally:
        torch.set_num_threads(threads)
    figures = summarize(groups, greedy_rewards, config.top_ratio)
    logger.info("demo model on %d held-out prompts: %s", len(problems), figures)
    return DemoEvalResult(num_prompts=len(problems), group_size=config.group_size, **figures)
