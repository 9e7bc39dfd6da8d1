"""One set of statistics per distinct next-token distribution.

Answers of one group share their prompt, and often a prefix: the first answer tokens of a
group are all predicted from the same context, so their next-token distributions are equal in
exact arithmetic. Computed in different rows of a padded batch they differ in the last float32
digits, which would break "ties broken by (group, answer, position)" by rounding noise. Here the
statistics of the distribution (entropy, sum pi^2, top alternatives) of every repeated context
are copied from its first occurrence in (group, answer, position) order, and so are the
target's log-prob and g where the target token is the same too. Equal-in-exact-arithmetic
scores are then bit-equal, and the stable sort of :mod:`gmts_core.methods.selection` breaks their
ties
by flat order.
"""

from __future__ import annotations

import math
from typing import Any

import torch

_DISTRIBUTION_FIELDS = ("entropy", "sum_sq_prob", "top_ids", "top_logprobs")
_TARGET_FIELDS = ("logprob", "grad_norm")


def repeated_contexts(
    sequences: list[tuple[list[int], list[int]]], window: int | None = None
) -> tuple[list[int], list[int], list[bool]]:
    """Flat positions (answer tokens in (answer, position) order) whose context occurred before:
    (source, destination, same target token) triples as three lists, the source being the
    context's first occurrence. A trie over the contexts finds them in O(total tokens). With a
    ``longrope`` ``window`` W (:mod:`gmts_core.model.rope_window`) only sequences on the same side
    of W (prompt + answer within it, or past it) share contexts: their forwards use other RoPE
    frequencies.

    A source is never a destination (each position has one context, whose first occurrence
    it either is or is not), so the copies can be applied in any order.
    """
    roots: dict[tuple[int, ...], list[Any]] = {}  # node: [first flat position, children]
    src: list[int] = []
    dst: list[int] = []
    same: list[bool] = []
    flat_targets: list[int] = []
    for prompt, answer in sequences:
        past = window is not None and len(prompt) + len(answer) > window
        node = roots.setdefault((past, *prompt), [None, {}])
        for token in answer:
            pos = len(flat_targets)
            flat_targets.append(token)
            first = node[0]
            if first is None:
                node[0] = pos
            else:
                src.append(first)
                dst.append(pos)
                same.append(flat_targets[first] == token)
            children = node[1]
            node = children.get(token)
            if node is None:
                node = children[token] = [None, {}]
    return src, dst, same


def share_identical_contexts(
    sequences: list[tuple[list[int], list[int]]], answers: list[Any], window: int | None = None
) -> None:
    """Make the statistics of equal contexts identical, in place.

    ``answers[i]`` is the :class:`gmts_core.stats.forward.AnswerStats` of ``sequences[i]`` =
    (prompt_ids, answer_ids); the context of answer token t is prompt_ids + answer_ids[:t].
    The copies are done field by field on the whole batch at once (one gather and one
    scatter per field), then written back into the answers' own tensors. ``window``: as in
    :func:`repeated_contexts`.
    """
    src, dst, same = repeated_contexts(sequences, window)
    if not dst:
        return
    device = answers[0].hidden_norm.device
    src_t = torch.tensor(src, device=device)
    dst_t = torch.tensor(dst, device=device)
    same_t = torch.tensor(same, device=device)
    src_target, dst_target = src_t[same_t], dst_t[same_t]
    lengths = [len(a) for _, a in sequences]
    touched = _touched_answers(dst, lengths)
    fields = [(n, src_t, dst_t) for n in _DISTRIBUTION_FIELDS]
    fields += [(n, src_target, dst_target) for n in _TARGET_FIELDS]
    for name, s, d in fields:
        parts = [getattr(a.stats, name) for a in answers]
        _scatter(parts, s, d, lengths, touched, device)
    _scatter([a.hidden_norm for a in answers], src_t, dst_t, lengths, touched, device)


def _touched_answers(dst: list[int], lengths: list[int]) -> list[int]:
    """Indices of the answers that hold at least one destination position."""
    bounds, start = [], 0
    for n in lengths:
        bounds.append((start, start + n))
        start += n
    marked, a = set(), 0
    for d in dst:  # dst is increasing
        while d >= bounds[a][1]:
            a += 1
        marked.add(a)
    return sorted(marked)


def _scatter(
    parts: list[torch.Tensor],
    src: torch.Tensor,
    dst: torch.Tensor,
    lengths: list[int],
    touched: list[int],
    device: torch.device,
) -> None:
    """parts (one tensor per answer, (L_i, ...)) as one flat tensor: flat[dst] = flat[src],
    then each touched answer's tensor overwritten with its slice."""
    if dst.numel() == 0:
        return
    base = _consecutive_views(parts)
    if base is not None:  # the answers' tensors are slices of one tensor: copy within it
        base[dst.to(base.device)] = base[src.to(base.device)]
        return
    flat = torch.cat([p.to(device) for p in parts])  # (N, ...)
    flat[dst] = flat[src]
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    for a in touched:
        parts[a].copy_(flat[offsets[a] : offsets[a + 1]])


def _consecutive_views(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """The one tensor (N, ...) whose consecutive row slices ``parts`` are (as the statistics of
    one forward are split per answer), or None. Writing into it writes into the parts."""
    first = parts[0]
    rest = tuple(first.shape[1:])
    row = math.prod(rest)
    storage = first.untyped_storage().data_ptr()
    offset = first.storage_offset()
    for p in parts:
        if (
            p.untyped_storage().data_ptr() != storage
            or p.dtype != first.dtype
            or tuple(p.shape[1:]) != rest
            or p.storage_offset() != offset
            or not p.is_contiguous()
        ):
            return None
        offset += p.shape[0] * row
    total = sum(p.shape[0] for p in parts)
    strides = (row, *torch.empty(rest).stride()) if rest else (1,)
    return first.as_strided((total, *rest), strides, first.storage_offset())
