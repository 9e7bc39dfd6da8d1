"""Token statistics of answers from one forward pass of the model over prompt + answer.

The transformer body runs once over each padded micro-batch; the LM head is then applied only
to the positions that predict answer tokens, chunk by chunk, so full-vocabulary logits never
exist for prompt positions or for all answer positions at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.errors import InvalidInputError, NonFiniteLogitsError
from gmts_core.knobs import DEFAULT_TEMPERATURE
from gmts_core.model.logit_head import HeadPath, head_path
from gmts_core.model.rope_window import RopeWindow, longrope_window, rope_window
from gmts_core.stats import packed_forward
from gmts_core.stats.contexts import share_identical_contexts
from gmts_core.stats.metrics import (
    DEFAULT_CHUNK_SIZE,
    TokenStats,
    rows_per_chunk,
    token_stats_chunked,
)
from gmts_core.stats.shared_prompts import serves, shareable, shared_prompt_hidden
from gmts_core.stats.vocab_tiled import token_stats_from_hidden


@dataclass
class AnswerStats:
    """Statistics of one answer's tokens (length L)."""

    stats: TokenStats  # each field (L,) or (L, K)
    hidden_norm: torch.Tensor  # (L,) ||h_t|| of the final hidden state that predicts token t


def token_budget_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Group sequence indices so that each padded batch has at most ``max_tokens`` tokens."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        if current and max(longest, n) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    return batches + ([current] if current else [])


def _window_sides(
    batches: list[list[int]], lengths: list[int], rope: RopeWindow | None
) -> list[list[int]]:
    """``batches`` split so that none mixes sequences within a ``longrope`` window and past
    it: a padded forward takes its RoPE frequencies from the padded length, so each sequence
    then gets those of its own forward (:mod:`gmts_core.model.rope_window`)."""
    if rope is None or rope.rope_type != "longrope":
        return batches
    out = []
    for batch in batches:
        within = [i for i in batch if lengths[i] <= rope.window]
        past = [i for i in batch if lengths[i] > rope.window]
        out += [part for part in (within, past) if part]
    return out


def _answer_hidden(
    body: Any, seqs: list[tuple[list[int], list[int]]], pad_id: int, device: torch.device
) -> torch.Tensor:
    """Final hidden states at the positions that predict each answer token, flat in (answer,
    position) order: (N, D)."""
    width = max(len(p) + len(a) for p, a in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (B, T) right-padded
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, (p, a) in enumerate(seqs):
        ids[row, : len(p) + len(a)] = torch.tensor(p + a)
        mask[row, : len(p) + len(a)] = 1
    hidden = body(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)[0]
    # hidden: (B, T, D)
    # position t predicts token t + 1, so answer token j is predicted at len(p) - 1 + j; one
    # gather for all rows (its backward is one scatter, where a slice per row would allocate
    # and zero a (B, T, D) gradient for each row)
    flat = [row * width + len(p) - 1 + j for row, (p, a) in enumerate(seqs) for j in range(len(a))]
    return hidden.reshape(-1, hidden.shape[-1]).index_select(0, torch.tensor(flat, device=device))


def answer_logits(
    model: Any,
    sequences: list[tuple[list[int], list[int]]],
    pad_id: int,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states (N, D) and float32 logits (N, V), after any post-head transform, at the
    positions that predict answer tokens, flat in (answer, position) order (the model's own
    logits: :func:`gmts_core.model.logit_head.head_path`).

    One padded forward of the body over all ``sequences``; differentiable when grad is enabled
    (the training forward of :mod:`gmts_core.grpo.loss` and the RL step use it). The LM head
    runs only on the answer positions, so prompt positions never get logits. With
    ``share_prompts`` (the RL step's training forwards), a batch of several answers to each
    prompt runs each distinct prompt once, where the model passes that path's probe: without
    padding for plain Llama-layout bodies (:mod:`gmts_core.stats.packed_forward`), else
    through the model's forward with a cache (:mod:`gmts_core.stats.shared_prompts`).
    """
    path = head_path(model)  # the model's own logits, post-head transforms included
    hidden = answer_hidden(model, sequences, pad_id, share_prompts)  # (N, D)
    logits = path.logits(hidden).float()  # (N, V)
    return hidden, logits


def answer_hidden(
    model: Any,
    sequences: list[tuple[list[int], list[int]]],
    pad_id: int,
    share_prompts: bool = False,
) -> torch.Tensor:
    """The body's final hidden states (N, D) at the positions that predict answer tokens, flat
    in (answer, position) order: :func:`answer_logits` without the LM head, for callers that
    need the head on some rows only (``head_path(model).logits(hidden[rows])``)."""
    path = head_path(model)
    device = next(model.parameters()).device
    body = path.body
    shared = share_prompts and shareable(sequences)
    if shared and packed_forward.serves(body, _answer_hidden, pad_id):
        return packed_forward.packed_hidden(body, sequences, device)  # (N, D)
    if shared and serves(body, _answer_hidden, pad_id):
        return shared_prompt_hidden(body, sequences, pad_id, device)  # (N, D)
    return _answer_hidden(body, sequences, pad_id, device)  # (N, D)


def stats_from_logits(
    logits: torch.Tensor,
    hidden: torch.Tensor,
    sequences: list[tuple[list[int], list[int]]],
    temperature: float = DEFAULT_TEMPERATURE,
    top_k: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[AnswerStats]:
    """Per-answer statistics from logits (N, V) and hidden states (N, D) already computed for
    the answer tokens of ``sequences`` (as :func:`answer_logits` returns them), e.g. by a
    training forward: the statistics then cost no forward of their own. Never differentiable.

    Raises NonFiniteLogitsError if any answer token's logits hold NaN or +inf (a target at a
    -inf logit is analysed: :func:`check_finite`).
    """
    logits, hidden = logits.detach(), hidden.detach()
    targets = torch.tensor([t for _, a in sequences for t in a], device=logits.device)  # (N,)
    rows = rows_per_chunk(chunk_size, logits.shape[-1])  # the logits exist: chunks bound temps
    stats = token_stats_chunked(
        len(targets), lambda sl: logits[sl], targets, temperature, top_k, rows
    )
    return _per_answer(stats, hidden, sequences)


def _per_answer(
    stats: TokenStats, hidden: torch.Tensor, sequences: list[tuple[list[int], list[int]]]
) -> list[AnswerStats]:
    """Flat statistics (N,) and hidden states (N, D) split into one AnswerStats per answer
    (views, no copies); raises NonFiniteLogitsError on NaN or +inf logits (:func:`check_finite`)."""
    check_finite(stats)
    norms = hidden.detach().float().norm(dim=-1)  # (N,)
    out, start = [], 0
    for _, answer in sequences:
        sl = slice(start, start + len(answer))
        parts = (getattr(stats, f.name)[sl] for f in dataclasses.fields(stats))
        out.append(AnswerStats(TokenStats(*parts), norms[sl]))
        start = sl.stop
    return out


def check_finite(stats: TokenStats) -> None:
    """Raise NonFiniteLogitsError where a NaN or +inf logit made the statistics undefined.

    A given answer token at a -inf logit (a model that masks part of its vocabulary) is not an
    error: its statistics are defined, log p = -inf, H the entropy of the distribution and
    g = ||e_y - pi|| / tau (all finite but log p), and they are analysed as such."""
    finite = torch.isfinite(stats.entropy) & torch.isfinite(stats.grad_norm)
    masked_target = stats.logprob == float("-inf")
    if not bool((finite & (torch.isfinite(stats.logprob) | masked_target)).all()):
        raise NonFiniteLogitsError("the model produced NaN or infinite logits for this input")


def answer_token_stats(
    model: Any,
    sequences: list[tuple[list[int], list[int]]],
    pad_id: int,
    temperature: float = DEFAULT_TEMPERATURE,
    top_k: int = 0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_batch_tokens: int = 8192,
) -> list[AnswerStats]:
    """Statistics of every answer token for (prompt_ids, answer_ids) pairs.

    Raises NonFiniteLogitsError if the model produces NaN or +inf logits for any answer token
    (a target at a -inf logit is analysed: :func:`check_finite`).
    """
    if any(not p for p, _ in sequences):
        raise InvalidInputError("every prompt needs at least one token")
    path = head_path(model)  # the model's own logits, post-head transforms included
    device = next(model.parameters()).device
    results: list[AnswerStats | None] = [None] * len(sequences)
    with torch.no_grad():
        lengths = [len(p) + len(a) for p, a in sequences]
        batches = token_budget_batches(lengths, max_batch_tokens)
        for batch in _window_sides(batches, lengths, rope_window(model.config)):
            seqs = [sequences[i] for i in batch]
            hidden = _answer_hidden(path.body, seqs, pad_id, device)  # (N, D)
            stats = _head_stats(hidden, path, seqs, temperature, top_k, chunk_size)
            for i, s in zip(batch, _per_answer(stats, hidden, seqs), strict=True):
                results[i] = s
    answers = [r for r in results if r is not None]
    # equal distributions -> bit-equal statistics
    share_identical_contexts(sequences, answers, longrope_window(model.config))
    return answers


def _plain_linear(head: Any) -> bool:
    """Whether the head is exactly ``nn.Linear`` run as such (no hooks, no replaced forward,
    e.g. by an offloading wrapper), so its matmul may be done by hand, tile by tile."""
    return (
        type(head) is torch.nn.Linear
        and not head._forward_hooks
        and not head._forward_pre_hooks
        and "forward" not in vars(head)
    )


def _head_stats(
    hidden: torch.Tensor,
    path: HeadPath,
    sequences: list[tuple[list[int], list[int]]],
    temperature: float,
    top_k: int,
    chunk_size: int,
) -> TokenStats:
    """Flat statistics of the answer tokens of ``sequences`` from their final hidden states
    (N, D). A plain linear head runs over all N rows one vocabulary tile at a time
    (:mod:`gmts_core.stats.vocab_tiled`: one matmul's cost, not one per chunk of rows); other heads
    (scaled, soft-capped, adapted, hooked) give their logits chunk by chunk."""
    targets = torch.tensor([t for _, a in sequences for t in a], device=hidden.device)  # (N,)
    if path.scale is None and path.softcap is None and _plain_linear(path.head):
        head = path.head
        return token_stats_from_hidden(
            hidden.to(head.weight.device),
            head.weight,
            head.bias,
            targets,
            temperature,
            top_k,
            chunk_size,
        )
    return token_stats_chunked(
        len(targets), lambda sl: path.logits(hidden[sl]), targets, temperature, top_k, chunk_size
    )
