"""Sampling a group of G answers to one prompt with one batched, KV-cached ``generate``."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.errors import InvalidInputError

# ``generate`` draws from torch's global RNG; seeding it must not interleave across threads.
_RNG_LOCK = threading.Lock()


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample a group. temperature 0 means greedy decoding."""

    num_samples: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    seed: int = 0


@dataclass
class SampledAnswer:
    token_ids: list[int]  # answer tokens, including the EOS token when one was produced
    finished: bool  # True if the answer ended with EOS, False if cut at max_new_tokens


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _trim(row: list[int], eos_ids: set[int]) -> SampledAnswer:
    for i, tok in enumerate(row):
        if tok in eos_ids:
            return SampledAnswer(row[: i + 1], True)
    return SampledAnswer(row, False)


@torch.no_grad()
def sample_answers(
    model: Any, tokenizer: Any, prompt_ids: list[int], config: SamplingConfig
) -> list[SampledAnswer]:
    """Sample ``config.num_samples`` answers to ``prompt_ids`` in one batched generate call."""
    if not prompt_ids:
        raise InvalidInputError("prompt is empty after tokenization")
    if config.num_samples < 1 or config.max_new_tokens < 1:
        raise InvalidInputError("num_samples and max_new_tokens must be >= 1")
    device = next(model.parameters()).device
    input_ids = torch.tensor([prompt_ids], device=device).repeat(config.num_samples, 1)  # (G, P)
    greedy = config.temperature == 0
    gen_kwargs: dict[str, Any] = {
        "max_new_tokens": config.max_new_tokens,
        "do_sample": not greedy,
        "pad_token_id": tokenizer.pad_token_id,
        "attention_mask": torch.ones_like(input_ids),
        "use_cache": True,
    }
    if not greedy:
        gen_kwargs.update(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k)
    with _RNG_LOCK, torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(config.seed)
        out = model.generate(input_ids, **gen_kwargs)  # (G, P + T)
    eos_ids = _eos_ids(model, tokenizer)
    return [_trim(row, eos_ids) for row in out[:, len(prompt_ids) :].tolist()]
