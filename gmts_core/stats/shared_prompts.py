"""A forward over G answers to each prompt that runs each distinct prompt once.

In a GRPO batch every prompt has G answers, so a padded forward over the B x G full sequences
runs each prompt's tokens G times. Here the distinct prompts (all of one token length) run
once, into a cache (:func:`gmts_core.model.kv_cache.sampling_cache`); the cache's rows are repeated
for the answers (an ``index_select``, differentiable) and the answers run after them, right
padded. The hidden states that predict the answer tokens are the same as the padded forward's
(token 0 is predicted by the prompt's last position, token j by answer token j - 1), to
floating-point rounding, and so are the gradients through them: the prompt's keys and values
get the sum of their G answers' gradients, as they would as G copies.

A model is served after a probe on first use (:func:`serves`): on a small batch, the hidden
states of this forward must equal those of the padded forward within the load-time tolerance of
:mod:`gmts_core.model.logit_head`; models that fail (caches that cannot repeat rows, masks this
path does not reproduce) keep the padded forward.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from gmts_core.model.kv_cache import cache_keyword, keep_rows, sampling_cache
from gmts_core.model.logit_head import PROBE_TOLERANCE, PROBE_TOLERANCE_LOW_PRECISION
from gmts_core.model.rope_window import rope_window

Sequences = list[tuple[list[int], list[int]]]

_VERDICTS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def shareable(seqs: Sequences) -> bool:
    """True when the batch has prompts to share: all of one non-zero length, fewer distinct
    prompts than answers, and some answer longer than one token."""
    lengths = {len(p) for p, _ in seqs}
    if len(lengths) != 1 or 0 in lengths or any(not a for _, a in seqs):
        return False
    distinct = {tuple(p) for p, _ in seqs}
    return len(distinct) < len(seqs) and max(len(a) for _, a in seqs) > 1


def shared_prompt_hidden(
    body: Any, seqs: Sequences, pad_id: int, device: torch.device
) -> torch.Tensor:
    """Final hidden states at the positions that predict each answer token, flat in (answer,
    position) order (N, D), with each distinct prompt run once. ``seqs`` must be
    :func:`shareable`."""
    distinct: dict[tuple[int, ...], int] = {}
    index = [distinct.setdefault(tuple(p), len(distinct)) for p, _ in seqs]  # row -> prompt
    width = len(seqs[0][0])
    steps = max(len(a) for _, a in seqs) - 1  # the last answer token predicts nothing
    cache = sampling_cache(body.config, width + steps)
    keyword = cache_keyword(body)
    prompts = torch.tensor(list(distinct), device=device)  # (U, P)
    prompt_hidden = body(input_ids=prompts, use_cache=True, **{keyword: cache})[0]  # (U, P, D)
    keep_rows(cache, torch.tensor(index, device=device))  # the prompt's cache, once per answer
    ids = torch.full((len(seqs), steps), pad_id, dtype=torch.long)  # (R, W) right-padded
    mask = torch.zeros((len(seqs), width + steps), dtype=torch.long)
    mask[:, :width] = 1
    for row, (_, a) in enumerate(seqs):
        ids[row, : len(a) - 1] = torch.tensor(a[:-1])
        mask[row, width : width + len(a) - 1] = 1
    answer_hidden = body(
        input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=True, **{keyword: cache}
    )[0]  # (R, W, D)
    # token 0 of row r is predicted by its prompt's last position, token j by answer token j - 1
    flat = torch.cat([prompt_hidden[:, -1], answer_hidden.reshape(-1, answer_hidden.shape[-1])])
    first = len(distinct)
    positions = [
        index[row] if j == 0 else first + row * steps + j - 1
        for row, (_, a) in enumerate(seqs)
        for j in range(len(a))
    ]
    return flat.index_select(0, torch.tensor(positions, device=device))


def serves(body: Any, padded: Any, pad_id: int) -> bool:
    """Whether :func:`shared_prompt_hidden` gives this body's padded-forward hidden states
    (``padded(body, seqs, pad_id, device)``), probed once per body on a small batch: two prompts
    of four tokens, answers of 3, 1 and 2 tokens (one row padded, one with no continuation).
    Never for a RoPE whose frequencies depend on the forward's length
    (:mod:`gmts_core.model.rope_window`): the prompt's cached keys would keep the short ones."""
    if rope_window(getattr(body, "config", None)) is not None:
        return False
    with _LOCK:
        if body in _VERDICTS:
            return _VERDICTS[body]
    verdict = _probe(body, padded, pad_id)
    with _LOCK:
        _VERDICTS[body] = verdict
    return verdict


def _probe(body: Any, padded: Any, pad_id: int) -> bool:
    if getattr(body, "training", False):
        return False  # dropout would make both sides random
    ours = lambda b, seqs, device: shared_prompt_hidden(b, seqs, pad_id, device)  # noqa: E731
    return matches_padded(body, ours, padded, pad_id)


HiddenForward = Callable[[Any, Sequences, torch.device], torch.Tensor]


def matches_padded(body: Any, ours: HiddenForward, padded: Any, pad_id: int) -> bool:
    """Whether ``ours(body, seqs, device)`` gives the hidden states of the padded forward
    (``padded(body, seqs, pad_id, device)``) within the load-time tolerance of
    :mod:`gmts_core.model.logit_head`, on a small probe batch: two prompts of four tokens,
    answers of 3, 1 and 2 tokens (one row padded, one with no continuation). Any exception of
    the model's layers counts as a mismatch."""
    try:
        param = next(body.parameters())
        vocab = int(body.config.vocab_size)
        tok = lambda i: (3 + 7 * i) % vocab  # noqa: E731
        seqs = [
            ([tok(i) for i in range(4)], [tok(10), tok(11), tok(12)]),
            ([tok(i) for i in range(4)], [tok(13)]),
            ([tok(20 + i) for i in range(4)], [tok(14), tok(15)]),
        ]
        with torch.no_grad():
            got = ours(body, seqs, param.device).float()
            want = padded(body, seqs, pad_id, param.device).float()
    except Exception:  # noqa: BLE001 - any failure of the model's own layers: not served
        return False
    tol = PROBE_TOLERANCE.get(param.dtype, PROBE_TOLERANCE_LOW_PRECISION)
    size = float(want.abs().amax())
    diff = float((got - want).abs().amax())
    return got.shape == want.shape and diff <= tol * (1.0 + size)
