"""Sampling a group of G answers to one prompt in one batched, KV-cached call.

The call is our own sampler (:mod:`gmts_core.sampling.kv_sampler`: pre-allocated cache, prefill
once per prompt, finished rows dropped, statistics from the logits each token was drawn from) for
every model it serves, and transformers' ``generate`` for the others (said in the log). Both draw
from the same distribution: the model's logits through its generation processors, temperature,
top-k and top-p, as ``generate`` applies them.

Several groups whose settings differ at most in the seed share one call (:func:`sample_groups`):
on a small model each decoding step costs about the same for 8 rows as for 64, so an RL step's
rollout of 8 prompts runs in one call instead of eight. Prompts of different lengths share a
call where the fused decoding step serves the model
(:func:`gmts_core.sampling.sampler_probe.serves_mixed_lengths`: right-aligned in the cache,
each row at its own positions), while the padding stays within ``MAX_PADDING_FACTOR``;
elsewhere a call takes prompts of one length.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteriaList

from gmts_core.base_config import SamplingConfig as SamplingConfig
from gmts_core.bounds import MIN_TEMPERATURE
from gmts_core.errors import InvalidInputError, NonFiniteLogitsError
from gmts_core.model.rope_window import refuse_past_window, rope_window
from gmts_core.progress import checkpoint
from gmts_core.sampling.kv_sampler import DecodeRequest, decode
from gmts_core.sampling.sampler_probe import serves_mixed_lengths, unserved_reason
from gmts_core.stats.forward import AnswerStats, answer_token_stats
from gmts_core.stats.sampling_stats import StatsWhileSampling

logger = logging.getLogger(__name__)

# ``generate`` draws from torch's global RNG; seeding it must not interleave across threads.
_RNG_LOCK = threading.Lock()
_RESCORE_LOGGED: weakref.WeakSet[Any] = weakref.WeakSet()


@dataclass
class SampledAnswer:
    token_ids: list[int]  # answer tokens, including the EOS token when one was produced
    finished: bool  # True if the answer ended with EOS, False if cut at max_new_tokens
    stats: AnswerStats | None = None  # collected while sampling, when asked (StatsSpec)


@dataclass(frozen=True)
class StatsSpec:
    """Collect each sampled token's statistics while sampling (see gmts_core.stats.sampling_stats):
    at temperature tau (the analysis', not necessarily the sampling temperature), with the
    top ``top_k`` alternatives, ``chunk_size`` rows at a time."""

    temperature: float
    top_k: int = 0
    chunk_size: int = 128


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


class RejectNonFiniteLogits(LogitsProcessor):
    """Stops generation with NonFiniteLogitsError when a step's scores hold NaN or +inf, or a
    row is all -inf: sampling from them would fail inside ``torch.multinomial`` (on CUDA, with
    a device-side assert that breaks the process's CUDA context)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        checkpoint()  # a cancelled job (client gone, shutdown) stops between decoding steps
        # one reduction: a row's max is NaN if it holds a NaN (amax propagates NaN), +inf if
        # it holds +inf, and -inf iff every entry is -inf
        if not bool(torch.isfinite(scores.amax(dim=-1)).all()):  # scores: (B, V)
            raise NonFiniteLogitsError("the model produced NaN or infinite logits while sampling")
        return scores


MAX_BATCH_ROWS = 512  # answers sampled in one generate call at most (memory bound)
# prompts of different lengths share a call while its cache (every row as long as the longest
# prompt + max_new_tokens) holds at most this many times their own prompt + answer slots: one
# long prompt among many short ones would otherwise give every row its length (memory no longer
# bounded by the request's token count, e.g. one 2000-token prompt among 27 short ones: 14x)
MAX_PADDING_FACTOR = 2.0


def _check(prompt_ids: list[int], config: SamplingConfig) -> None:
    if not prompt_ids:
        raise InvalidInputError("prompt is empty after tokenization")
    if config.num_samples < 1 or config.max_new_tokens < 1:
        raise InvalidInputError("num_samples and max_new_tokens must be >= 1")
    if config.temperature != 0 and not MIN_TEMPERATURE <= config.temperature < float("inf"):
        raise InvalidInputError(
            f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, "
            f"got {config.temperature!r}"
        )


def generate_answers(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    config: SamplingConfig,
    stats: StatsSpec | None = None,
    use_generate: bool = False,
) -> list[SampledAnswer]:
    """``config.num_samples`` answers to each prompt in one call, prompt by prompt (of one
    length, unless :func:`gmts_core.sampling.sampler_probe.serves_mixed_lengths`); with
    ``stats``, each with its tokens' statistics. Our sampler serves the model unless
    ``use_generate`` or :func:`gmts_core.sampling.sampler_probe.unserved_reason` says otherwise.

    For a RoPE whose frequencies switch with the forward's length
    (:mod:`gmts_core.model.rope_window`) a ``dynamic`` one is refused past its window
    (InvalidInputError), and the statistics of answers that cross a ``longrope`` one are those of a
    full forward (:func:`_rescore`)."""
    refuse_past_window(model, max(len(p) for p in prompts), config.max_new_tokens)
    if len({len(p) for p in prompts}) > 1 and (use_generate or not serves_mixed_lengths(model)):
        raise ValueError("prompts of different lengths in one call need serves_mixed_lengths")
    if use_generate or unserved_reason(model) is not None:
        answers = hf_generate_answers(model, tokenizer, prompts, config, stats)
        return _rescore(model, tokenizer, prompts, answers, stats)
    request = DecodeRequest(
        num_samples=config.num_samples,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=config.top_k,
        stats_temperature=None if stats is None else stats.temperature,
        stats_top_k=0 if stats is None else stats.top_k,
        stats_chunk_size=128 if stats is None else stats.chunk_size,
    )
    eos_ids = _eos_ids(model, tokenizer)
    device = next(model.parameters()).device
    with _RNG_LOCK, torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(config.seed)
        rows = decode(model, prompts, request, eos_ids)
    answers = []
    for row in rows:
        answer = _trim(row.token_ids, eos_ids)
        answer.stats = row.stats
        answers.append(answer)
    return _rescore(model, tokenizer, prompts, answers, stats)


def _rescore(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    answers: list[SampledAnswer],
    stats: StatsSpec | None,
) -> list[SampledAnswer]:
    """``answers`` (``len(answers) // len(prompts)`` per prompt, in order), the statistics of
    those that cross a ``longrope`` window (:mod:`gmts_core.model.rope_window`) replaced by those of
    a full forward over prompt + answer: cached decoding rotated the prompt's keys with the
    short factors, the model's own forward over the whole sequence uses the long ones. The
    tokens stay as drawn (as ``generate`` draws them)."""
    rope = rope_window(model.config)
    if stats is None or rope is None or rope.rope_type != "longrope":
        return answers
    per_prompt = len(answers) // len(prompts)
    prompt_of = [prompts[i // per_prompt] for i in range(len(answers))]
    todo = [i for i, a in enumerate(answers) if rope.crosses(len(prompt_of[i]), len(a.token_ids))]
    if not todo:
        return answers
    if model not in _RESCORE_LOGGED:
        _RESCORE_LOGGED.add(model)
        logger.info(
            "%s: its longrope RoPE switches frequencies past %d tokens, where cached decoding "
            "differs from a full forward; answers that cross it get a full forward's statistics",
            type(model).__name__,
            rope.window,
        )
    seqs = [(prompt_of[i], answers[i].token_ids) for i in todo]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    fresh = answer_token_stats(model, seqs, pad, stats.temperature, stats.top_k, stats.chunk_size)
    for i, s in zip(todo, fresh, strict=True):
        answers[i].stats = s
    return answers


@torch.no_grad()
def hf_generate_answers(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    config: SamplingConfig,
    stats: StatsSpec | None = None,
) -> list[SampledAnswer]:
    """As :func:`generate_answers`, with transformers' ``generate`` (statistics by forward hooks,
    :class:`gmts_core.stats.sampling_stats.StatsWhileSampling`)."""
    device = next(model.parameters()).device
    input_ids = torch.tensor(prompts, device=device)  # (B, P)
    input_ids = input_ids.repeat_interleave(config.num_samples, 0)  # (B * G, P)
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
        gen_kwargs["logits_processor"] = LogitsProcessorList([RejectNonFiniteLogits()])
    collector = None
    if stats is not None:
        collector = StatsWhileSampling(model, stats.temperature, stats.top_k, stats.chunk_size)
        gen_kwargs["stopping_criteria"] = StoppingCriteriaList([collector])
    with contextlib.ExitStack() as stack:
        if collector is not None:
            stack.enter_context(collector)
        stack.enter_context(_RNG_LOCK)
        stack.enter_context(torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]))
        torch.manual_seed(config.seed)
        out = model.generate(input_ids, **gen_kwargs)  # (B * G, P + T)
    eos_ids = _eos_ids(model, tokenizer)
    answers = [_trim(row, eos_ids) for row in out[:, len(prompts[0]) :].tolist()]
    if collector is not None:
        for row, answer in enumerate(answers):
            answer.stats = collector.answer_stats(row, len(answer.token_ids))
    return answers


def sample_answers(
    model: Any, tokenizer: Any, prompt_ids: list[int], config: SamplingConfig
) -> list[SampledAnswer]:
    """Sample ``config.num_samples`` answers to ``prompt_ids`` in one batched generate call."""
    _check(prompt_ids, config)
    return generate_answers(model, tokenizer, [prompt_ids], config)


def batch_seed(seeds: Sequence[int]) -> int:
    """The seed of one generate call for groups with these seeds (a lone group keeps its own)."""
    if len(seeds) == 1:
        return int(seeds[0])
    digest = hashlib.sha256(",".join(map(str, seeds)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _calls(members: list[int], lengths: list[int], per_call: int) -> list[list[int]]:
    """``members`` (with their prompt + answer ``lengths``) in calls of at most ``per_call``,
    longest first, each cache at most ``MAX_PADDING_FACTOR`` times its own slots; each call
    in the members' own order. Members of one length: consecutive chunks."""
    if len(set(lengths)) == 1:
        return [members[i : i + per_call] for i in range(0, len(members), per_call)]
    order = sorted(range(len(members)), key=lambda k: -lengths[k])  # stable: ties in order
    calls: list[list[int]] = []
    current: list[int] = []
    own = 0  # the current call's own slots (per answer)
    for k in order:
        if current and (
            len(current) == per_call
            or (len(current) + 1) * lengths[current[0]] > MAX_PADDING_FACTOR * (own + lengths[k])
        ):
            calls.append(current)
            current, own = [], 0
        current.append(k)
        own += lengths[k]
    calls.append(current)
    return [[members[k] for k in sorted(call)] for call in calls]


def sample_groups(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[list[int]],
    configs: Sequence[SamplingConfig],
    stats: StatsSpec | None = None,
) -> list[list[SampledAnswer]]:
    """Each group's answers; compatible groups share a call (see the module docstring).

    A group sampled alone gets exactly what :func:`sample_answers` gives it. Groups sampled
    together are seeded with :func:`batch_seed` of their seeds, so the answers are a
    deterministic function of the prompts and all their settings. With ``stats`` every answer
    carries its tokens' statistics, collected while sampling (no forward pass of their own).
    """
    mixed = len({len(p) for p in prompts}) > 1 and serves_mixed_lengths(model)
    buckets: dict[tuple[int, SamplingConfig], list[int]] = {}
    for i, (p, c) in enumerate(zip(prompts, configs, strict=True)):
        _check(p, c)
        refuse_past_window(model, len(p), c.max_new_tokens)  # before any group is sampled
        buckets.setdefault((0 if mixed else len(p), dataclasses.replace(c, seed=0)), []).append(i)
    out: list[list[SampledAnswer]] = [[] for _ in prompts]
    for (_, shared), members in buckets.items():
        per_call = max(1, MAX_BATCH_ROWS // shared.num_samples)
        lengths = [len(prompts[i]) + shared.max_new_tokens for i in members]
        for chunk in _calls(members, lengths, per_call):
            call = dataclasses.replace(shared, seed=batch_seed([configs[i].seed for i in chunk]))
            rows = generate_answers(model, tokenizer, [prompts[i] for i in chunk], call, stats)
            for j, i in enumerate(chunk):
                out[i] = rows[j * shared.num_samples : (j + 1) * shared.num_samples]
    return out
