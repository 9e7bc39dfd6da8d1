"""Measure a demo model on held-out arithmetic prompts: accuracy, split groups, fork entropy.

For each of ``num_prompts`` held-out problems the model samples a group of ``group_size``
answers at temperature 1 (full distribution: no top-k, no top-p) and answers once greedily.
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

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from gmts_core.tasks.arith import ArithProblem, fork_token_mask, generate_problems

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoEvalConfig:
    """What to evaluate on: ``num_prompts`` held-out problems drawn with ``seed``."""

    num_prompts: int = 64
    group_size: int = 8
    temperature: float = 1.0
    top_ratio: float = 0.2
    max_new_tokens: int = 48
    seed: int = 0
    num_threads: int = 1  # one thread: reproducible, and fastest on a small shared CPU


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


def _prompt_batch(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str]
) -> dict[str, torch.Tensor]:
    return dict(tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False))


def _strip_answer(ids: list[int], eos_id: int, pad_id: int) -> list[int]:
    """The answer's tokens up to and including the first ``<eos>`` (padding dropped)."""
    out: list[int] = []
    for tok in ids:
        if tok == pad_id and tok != eos_id:
            break
        out.append(tok)
        if tok == eos_id:
            break
    return out


@torch.no_grad()
def sample_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    temperature: float | None,
    max_new_tokens: int,
) -> list[list[int]]:
    """One answer (token ids, ending at ``<eos>`` when the model stops) per prompt.

    ``temperature=None`` decodes greedily; otherwise samples the full distribution.
    """
    batch = _prompt_batch(tokenizer, prompts)
    sampling: dict[str, Any] = {"do_sample": False}
    if temperature is not None:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    out = model.generate(
        **batch,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **sampling,
    )
    width = batch["input_ids"].shape[1]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    return [_strip_answer(row[width:].tolist(), eos, pad) for row in out]


@torch.no_grad()
def answer_token_entropies(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    answers: list[list[int]],
    temperature: float,
) -> list[list[float]]:
    """Shannon entropy (nats) of the next-token distribution at temperature ``temperature``
    at every answer token, for answers to one prompt."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    width = len(prompt_ids) + max(1, max(len(a) for a in answers))
    ids = torch.full((len(answers), width), tokenizer.pad_token_id, dtype=torch.long)  # (G, T)
    mask = torch.zeros_like(ids)
    for row, ans in enumerate(answers):
        seq = prompt_ids + ans
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits.float() / temperature  # (G, T, V)
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)  # (G, T)
    start = len(prompt_ids) - 1  # the logits at position t predict token t + 1
    return [entropy[row, start : start + len(ans)].tolist() for row, ans in enumerate(answers)]


def sample_group(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problem: ArithProblem,
    config: DemoEvalConfig,
) -> SampledGroup:
    """Sample ``config.group_size`` answers to ``problem`` and annotate every answer token."""
    prompts = [problem.prompt] * config.group_size
    answers = sample_answers(model, tokenizer, prompts, config.temperature, config.max_new_tokens)
    entropies = answer_token_entropies(
        model, tokenizer, problem.prompt, answers, config.temperature
    )
    texts, masks = [], []
    for ans in answers:
        pieces = [tokenizer.decode([tok], skip_special_tokens=True) for tok in ans]
        text = "".join(pieces)
        texts.append(text)
        masks.append(fork_token_mask(pieces, problem.fork_spans_in(text)))
    rewards = [problem.reward(text).reward for text in texts]
    return SampledGroup(problem, answers, texts, rewards, entropies, masks)


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
    tokenizer: PreTrainedTokenizerBase,
    config: DemoEvalConfig | None = None,
    problems: list[ArithProblem] | None = None,
) -> DemoEvalResult:
    """Evaluate ``model`` on held-out problems (drawn with ``config.seed`` unless given)."""
    config = config or DemoEvalConfig()
    problems = problems or generate_problems(config.num_prompts, config.seed, "heldout")
    model.eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.num_threads)
    try:
        torch.manual_seed(config.seed)
        groups = [sample_group(model, tokenizer, p, config) for p in problems]
        prompts = [p.prompt for p in problems]
        greedy = sample_answers(model, tokenizer, prompts, None, config.max_new_tokens)
    finally:
        torch.set_num_threads(threads)
    greedy_rewards = [
        p.reward(tokenizer.decode(ans, skip_special_tokens=True)).reward
        for p, ans in zip(problems, greedy, strict=True)
    ]
    figures = summarize(groups, greedy_rewards, config.top_ratio)
    logger.info("demo model on %d held-out prompts: %s", len(problems), figures)
    return DemoEvalResult(num_prompts=len(problems), group_size=config.group_size, **figures)
