"""Our own KV-cached sampler: a batch of answers drawn token by token, without ``generate``.

One call samples G answers to each of several prompts of one token length:

prefill  -> one forward of the transformer body over the B distinct prompts (not B x G rows),
            whose cache is then repeated G times (:func:`gmts_core.model.kv_cache.repeat_rows`)
decode   -> per step, the LM head on the last hidden state
            (:func:`gmts_core.model.logit_head.head_path`: the logits the analysis reports,
            post-head transforms included), the model's generation processors (min length,
            temperature, top-k, top-p: transformers' own classes, in ``generate``'s order), then
            ``multinomial``'s draw (the same draws, faster on CPU:
            :func:`gmts_core.sampling.categorical.categorical`; ``argmax`` when greedy) and one
            body forward of the new tokens into a pre-allocated cache
(:mod:`gmts_core.model.kv_cache`) stopping -> a row that produced EOS is finished; once a quarter
            of the batch has finished the finished rows are dropped from the cache and the batch
            shrinks (never re-run)

With statistics asked for, each token's statistics are computed from the very logits it was
drawn from (:func:`gmts_core.stats.metrics.token_stats_chunked`), so no forward pass of their
own is needed.

A model is served after a probe on its first use (:mod:`gmts_core.sampling.sampler_probe`): the
sampler's logits, through prefill, repeated rows, decoding and dropped rows, must equal the
teacher-forced logits of its own body and head within the load-time tolerance of
:mod:`gmts_core.model.logit_head`. Models that fail the probe (recurrent or linear-attention
caches, extra generation inputs), or whose generation config asks for processors this sampler does
not apply (repetition penalty, bad words, ...), are sampled by ``generate`` instead, and the log
says so once per model.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import (
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.cache_utils import Cache

from gmts_core import native
from gmts_core.errors import NonFiniteLogitsError
from gmts_core.model.kv_cache import (
    PreallocatedLayer,
    cache_keyword,
    keep_rows,
    repeat_rows,
    sampling_cache,
)
from gmts_core.model.llama_layout import plain_linear
from gmts_core.model.logit_head import (
    HeadPath,
    head_path,
)
from gmts_core.model.lora_merge import linear_weights
from gmts_core.progress import checkpoint
from gmts_core.sampling.categorical import categorical
from gmts_core.sampling.fused_decode import FusedStep
from gmts_core.stats.forward import AnswerStats, check_finite
from gmts_core.stats.metrics import TokenStats, token_stats_chunked

logger = logging.getLogger(__name__)

SHRINK_FRACTION = 0.25  # drop finished rows once this share of the batch has finished

# generation settings this sampler does not reproduce, with the value that means "off";
# a model whose generation config sets any of them is sampled by ``generate``
_NEUTRAL: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "renormalize_logits": False,
    "remove_invalid_values": False,
    "guidance_scale": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "top_h": None,
    "watermarking_config": None,
    "stop_strings": None,
    "max_time": None,
}


@dataclass(frozen=True)
class DecodeRequest:
    """What one call samples: ``num_samples`` answers to each prompt, at most
    ``max_new_tokens`` tokens each; temperature 0 means greedy. ``stats_temperature`` (with
    ``stats_top_k`` alternatives, ``stats_chunk_size`` rows at a time) asks for each token's
    statistics at that temperature."""

    num_samples: int
    max_new_tokens: int
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    stats_temperature: float | None = None
    stats_top_k: int = 0
    stats_chunk_size: int = 128
    # decode Llama-layout models with the fused step (gmts_core.sampling.fused_decode)
    fused: bool = True


@dataclass
class DecodedRow:
    """One sampled answer's tokens (up to and including its EOS, if it produced one)."""

    token_ids: list[int]
    stats: AnswerStats | None = None


def _neutral(value: Any, off: Any) -> bool:
    return value is None or value == off or (off is None and value in ([], {}, ()))


def unsupported_settings(generation_config: Any) -> list[str]:
    """The names of the generation settings of this config that the sampler does not apply."""
    return [
        name
        for name, off in _NEUTRAL.items()
        if not _neutral(getattr(generation_config, name, None), off)
    ]


def _eos_tensor(generation_config: Any, device: torch.device) -> torch.Tensor | None:
    eos = generation_config.eos_token_id
    ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    return torch.tensor(ids, dtype=torch.long, device=device) if ids else None


def processors(
    generation_config: Any, request: DecodeRequest, prompt_length: int, device: torch.device
) -> LogitsProcessorList:
    """The logits processors ``generate`` applies for this request, in its order."""
    out = LogitsProcessorList()
    eos = _eos_tensor(generation_config, device)
    min_length = getattr(generation_config, "min_length", None)
    if eos is not None and min_length:
        out.append(MinLengthLogitsProcessor(min_length, eos, device=str(device)))
    min_new = getattr(generation_config, "min_new_tokens", None)
    if eos is not None and min_new:
        out.append(
            MinNewTokensLengthLogitsProcessor(prompt_length, min_new, eos, device=str(device))
        )
    if request.temperature == 0:  # greedy: no warpers
        return out
    if request.temperature != 1.0:
        out.append(TemperatureLogitsWarper(request.temperature))
    if request.top_k:
        out.append(TopKLogitsWarper(top_k=request.top_k, min_tokens_to_keep=1))
    if request.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=request.top_p, min_tokens_to_keep=1))
    return out


class DecodeBody:
    """Calls the transformer body with a cache (the keyword is ``cache`` in newer models,
    ``past_key_values`` in others) and returns the last position's hidden state (B, D); a
    decoding step of a Llama-layout model runs fused (:mod:`gmts_core.sampling.fused_decode`)."""

    def __init__(self, path: HeadPath, fused: bool = True) -> None:
        self.path = path
        self.keyword = cache_keyword(path.body)
        self.fused = FusedStep.of(path.body) if fused else None
        # the LM head's product by the native kernel (a plain Linear head on CPU): a few rows
        # by the vocabulary's weights, the largest matrix of a small model
        kernels = native.decode_kernels() if plain_linear(path.head) else None
        self._head = None if kernels is None else (kernels, *linear_weights(path.head))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The model's logits (n, V) at the last hidden states (n, D), float32: the path's
        head and transform (:meth:`gmts_core.model.logit_head.HeadPath.logits`), the head's
        product by :meth:`gmts_core.native.DecodeKernels.linear` where it is a plain Linear."""
        if self._head is None:
            return self.path.logits(hidden).float()
        kernels, weight, bias = self._head
        return self.path.transform(kernels.linear(hidden.contiguous(), weight, bias)).float()

    def last_hidden(self, ids: torch.Tensor, cache: Any) -> torch.Tensor:
        out = self.path.body(input_ids=ids, use_cache=True, **{self.keyword: cache})
        return out[0][:, -1]  # (B, D): the position that predicts the next token

    def step(
        self, tokens: torch.Tensor, cache: Any, starts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The last hidden states (n, D) after one more token (n,) per row; ``starts``: each
        row's first cache slot when prompts of different lengths share the batch (only the
        fused step takes them, :func:`prefill`)."""
        if self.fused is not None and all(
            isinstance(layer, PreallocatedLayer) for layer in cache.layers
        ):
            return self.fused(tokens, cache, starts)
        if starts is not None:
            raise ValueError("prompts of different lengths need the fused decoding step")
        return self.last_hidden(tokens[:, None], cache)


@dataclass
class _StepStats:
    """Each decoding step's statistics for the rows then in the batch, from the logits the
    step's tokens were drawn from."""

    request: DecodeRequest
    rows: list[torch.Tensor] = field(default_factory=list)  # (n_t,) original row indices
    stats: list[TokenStats] = field(default_factory=list)
    norms: list[torch.Tensor] = field(default_factory=list)  # (n_t,)

    def add(
        self, rows: torch.Tensor, logits: torch.Tensor, tokens: torch.Tensor, hidden: torch.Tensor
    ) -> None:
        """Statistics of ``tokens`` (n,) under ``logits`` (n, V), predicted by ``hidden`` (n, D)."""
        assert self.request.stats_temperature is not None
        stats = token_stats_chunked(
            len(tokens),
            logits.__getitem__,
            tokens,
            self.request.stats_temperature,
            self.request.stats_top_k,
            self.request.stats_chunk_size,
        )
        self.rows.append(rows)
        self.stats.append(stats)
        self.norms.append(hidden.float().norm(dim=-1))

    def per_row(self, total: int, lengths: list[int]) -> list[AnswerStats]:
        """(T, N) tables filled step by step, then each row's first ``length`` entries."""
        steps = len(self.rows)
        names = list(TokenStats.__dataclass_fields__)
        tables = []
        for values in [*([getattr(s, n) for s in self.stats] for n in names), self.norms]:
            first = values[0]
            table = first.new_zeros((steps, total, *first.shape[1:]))  # (T, N, ...)
            for t, (rows, value) in enumerate(zip(self.rows, values, strict=True)):
                table[t, rows.to(first.device)] = value
            tables.append(table)
        out = []
        for row, length in enumerate(lengths):
            *fields, norms = (table[:length, row] for table in tables)
            token_stats = TokenStats(*fields)
            check_finite(token_stats)
            out.append(AnswerStats(token_stats, norms))
        return out


def _draw(scores: torch.Tensor, greedy: bool) -> torch.Tensor:
    """The next token of each row (B,), as ``generate`` draws it."""
    if greedy:
        return torch.argmax(scores, dim=-1)
    # NaN or +inf in a row, or a row of -inf, would fail inside multinomial (on CUDA with a
    # device-side assert that breaks the process's CUDA context)
    if not bool(torch.isfinite(scores.amax(dim=-1)).all()):  # scores: (B, V)
        raise NonFiniteLogitsError("the model produced NaN or infinite logits while sampling")
    probs = torch.softmax(scores, dim=-1)
    return categorical(probs, softmax_of_finite=True)  # multinomial's draw, bit for bit


@dataclass
class _Batch:
    """The rows being decoded: their original indices, prompts and tokens so far, and which of
    them have finished (kept in the batch until enough have, then dropped together). The
    drawn tokens reach ``generated`` (by original row) when rows are dropped, and at the end."""

    rows: torch.Tensor  # (n,) original row indices
    seq: torch.Tensor  # (n, P + T) prompt ids, then the tokens drawn so far
    finished: torch.Tensor  # (n,) bool
    generated: torch.Tensor  # (B * G, T) the drawn tokens by original row

    def shrink(self, cache: Any, tokens: torch.Tensor) -> torch.Tensor:
        """Drop the finished rows once they are ``SHRINK_FRACTION`` of the batch; the tokens
        of the rows kept."""
        if int(self.finished.sum()) < max(1, math.ceil(SHRINK_FRACTION * len(self.rows))):
            return tokens
        self.flush(self.finished)
        keep = (~self.finished).nonzero().squeeze(1)
        keep_rows(cache, keep)
        self.rows, self.seq, self.finished = self.rows[keep], self.seq[keep], self.finished[keep]
        return tokens[keep]

    def flush(self, which: torch.Tensor | None = None) -> None:
        """Copy the drawn tokens of these rows (a bool mask; all if None) to ``generated``."""
        steps = self.generated.shape[1]
        rows, seq = (self.rows, self.seq) if which is None else (self.rows[which], self.seq[which])
        self.generated[rows] = seq[:, -steps:]


def prefill(
    body: DecodeBody, prompts: list[list[int]], repeats: int, cache: Any, steps: int
) -> tuple[torch.Tensor, _Batch, torch.Tensor | None]:
    """One forward over the distinct prompts, its cache and last hidden states repeated for
    the ``repeats`` answers of each: hidden (B * G, D), the batch, and each row's first cache
    slot (B * G,), or None when the prompts have one length.

    Prompts of different lengths (only for the fused step, which reads the starts) are
    prefilled one length at a time, unpadded, each at its own positions 0..P-1, and placed in
    the cache right-aligned: every row's prompt ends at the same slot, so each decoding step
    writes one slot for all rows, and a row's slot s holds its position s - start."""
    device = next(body.path.body.parameters()).device
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    if min(lengths) == width:
        ids = torch.tensor(prompts, device=device)  # (B, P)
        hidden = body.last_hidden(ids, cache)
        starts = None
    else:
        if body.fused is None:
            raise ValueError("prompts of different lengths need the fused decoding step")
        ids = torch.zeros(len(prompts), width, dtype=torch.long, device=device)
        hidden_parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        for length in sorted(set(lengths)):
            rows = torch.tensor([i for i, n in enumerate(lengths) if n == length], device=device)
            part_ids = torch.tensor([prompts[i] for i in rows.tolist()], device=device)
            part = Cache(layers=[PreallocatedLayer(length) for _ in cache.layers])
            hidden_parts.append((rows, body.last_hidden(part_ids, part)))
            ids[rows, width - length :] = part_ids
            for layer, filled in zip(cache.layers, part.layers, strict=True):
                layer.place_rows(filled, rows, len(prompts), width)
        hidden = hidden_parts[0][1].new_empty(len(prompts), hidden_parts[0][1].shape[1])
        for rows, part_hidden in hidden_parts:
            hidden[rows] = part_hidden
        starts = (width - torch.tensor(lengths, device=device)).repeat_interleave(repeats)
    hidden = hidden.repeat_interleave(repeats, 0)  # (B * G, D)
    repeat_rows(cache, repeats)
    seq = ids.repeat_interleave(repeats, 0)  # (B * G, P)
    seq = torch.cat([seq, seq.new_zeros(len(seq), steps)], dim=1)  # (B * G, P + T)
    rows = torch.arange(len(seq), device=device)
    finished = torch.zeros_like(rows, dtype=torch.bool)
    return hidden, _Batch(rows, seq, finished, seq.new_zeros(len(seq), steps)), starts


@torch.no_grad()
def decode(
    model: Any, prompts: list[list[int]], request: DecodeRequest, eos_ids: set[int]
) -> list[DecodedRow]:
    """``request.num_samples`` answers to each prompt, prompt by prompt, drawn from torch's
    global RNG (the caller seeds it). Prompts of different lengths need the fused step
    (:func:`prefill`; :func:`gmts_core.sampling.sampler_probe.serves_mixed_lengths`)."""
    path = head_path(model)
    body = DecodeBody(path, request.fused)
    width, steps = max(len(p) for p in prompts), request.max_new_tokens
    cache = sampling_cache(model.config, width + steps)
    hidden, batch, starts = prefill(body, prompts, request.num_samples, cache, steps)
    total, device = len(batch.rows), batch.seq.device
    warp = processors(model.generation_config, request, width, device)
    eos = torch.tensor(sorted(eos_ids) or [-1], device=device)
    lengths = [steps] * total
    collected = _StepStats(request) if request.stats_temperature is not None else None
    for t in range(steps):
        checkpoint()  # a cancelled job (client gone, shutdown) stops between decoding steps
        logits = body.logits(hidden)  # (n, V): what the token is drawn from
        scores = warp(batch.seq[:, : width + t], logits) if warp else logits  # type: ignore[arg-type]
        tokens = _draw(scores, request.temperature == 0)  # (n,)
        if collected is not None:
            collected.add(batch.rows, logits, tokens, hidden)
        batch.seq[:, width + t] = tokens
        ended = torch.isin(tokens, eos) & ~batch.finished
        if bool(ended.any()):  # most steps end no row: nothing more to do for them
            for row in batch.rows[ended].tolist():
                lengths[row] = t + 1
            batch.finished |= ended
            if bool(batch.finished.all()):
                break
            tokens = batch.shrink(cache, tokens)
        if t + 1 == steps:
            break
        hidden = body.step(tokens, cache, None if starts is None else starts[batch.rows])
    batch.flush()
    generated = batch.generated.tolist()
    answers = [DecodedRow(ids[:n]) for ids, n in zip(generated, lengths, strict=True)]
    if collected is not None:
        for answer, stats in zip(answers, collected.per_row(total, lengths), strict=True):
            answer.stats = stats
    return answers
