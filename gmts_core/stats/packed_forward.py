"""The training forward of G answers to each prompt without padding, for Llama-layout bodies.

The RL step's training forward (:func:`gmts_core.stats.forward.answer_logits` with
``share_prompts``) needs the final hidden states that predict each answer token, with their
graph. Through the model's own forward that is a padded batch: on the RL step's batches about a
fifth of the answer positions are padding, and on a small model the framework around the layers
(masks, output containers, keyword plumbing) costs more than the arithmetic. For the plain
Llama/Qwen2 layout (:func:`gmts_core.model.llama_layout.is_plain_llama`) this module runs the
same layers' weights on the real tokens only:

* every token's projections, norms and MLP run on one flat (T, D) tensor: each distinct prompt
  once (all of one length P), then every answer's tokens but its last, packed;
* the rotary embedding is the model's own module's, at each token's position (prompt tokens
  0..P-1, answer token j at P + j, as in the padded forward);
* attention: the prompts over themselves (causal), and each answer's tokens over its prompt's
  keys and its own earlier tokens, in a (rows, width) layout gathered from the flat keys and
  values (padded queries are computed and dropped; they always see their prompt, so no row of
  scores is empty);
* the final norm runs on the positions that predict answer tokens only.

The norms, activation and rotary modules are the model's own, so their variants are the
model's. The result equals the padded forward's to floating-point rounding, and so do the
gradients through it (each prompt's keys and values get the sum of their answers' gradients,
as they would as G copies). A body is served after a probe on first use (:func:`serves`).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
import torch.nn.functional as F

from gmts_core.model.llama_layout import is_plain_llama
from gmts_core.stats.shared_prompts import matches_padded

Sequences = list[tuple[list[int], list[int]]]

_VERDICTS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class _Layout:
    """Where every token of a shareable batch sits: the flat token ids and positions, the
    gathers of the answers' (rows, width) attention layout, and the output positions."""

    def __init__(self, seqs: Sequences, device: torch.device) -> None:
        distinct: dict[tuple[int, ...], int] = {}
        prompt_of = [distinct.setdefault(tuple(p), len(distinct)) for p, _ in seqs]
        self.prompts, self.rows = len(distinct), len(seqs)
        p = self.prompt_len = len(seqs[0][0])
        first = self.prompts * p  # the answers' tokens follow the prompts' in the flat tensor
        flat = [t for prompt in distinct for t in prompt]
        flat += [t for _, a in seqs for t in a[:-1]]  # the last answer token predicts nothing
        self.ids = _longs(flat, device)  # (T,)
        lengths = _longs([len(a) - 1 for _, a in seqs], device)  # (R,) inputs per row
        starts = torch.cumsum(lengths, 0) - lengths  # (R,) each row's first, among the inputs
        owner = _longs(prompt_of, device)  # (R,) the row's distinct prompt
        self.width = w = max(1, int(lengths.max()))
        inputs = int(lengths.sum())
        within = _arange(inputs, device) - torch.repeat_interleave(starts, lengths)
        self.positions = torch.cat([_arange(p, device).repeat(self.prompts), p + within])
        # (R, W) the answers' query slots; padded ones point at token 0 (dropped after)
        slot = _arange(w, device)[None]  # (1, W)
        valid = slot < lengths[:, None]  # (R, W)
        own = torch.where(valid, first + starts[:, None] + slot, 0)
        self.query_index = own.reshape(-1)  # (R * W,)
        # (R, P + W) each row's keys: its prompt's tokens, then its own (padded ones masked)
        prompt_keys = owner[:, None] * p + _arange(p, device)[None]  # (R, P)
        self.key_index = torch.cat([prompt_keys, own], dim=1).reshape(-1)  # (R * (P + W),)
        causal = slot[:, None, :] <= slot[:, :, None]  # (1, W, W): key j <= query i
        sees = torch.ones(self.rows, w, p, dtype=torch.bool, device=device)  # prompts: all
        mask = torch.cat([sees, causal & valid[:, None, :]], dim=2)  # (R, W, P + W)
        self.mask = mask[:, None]  # (R, 1, W, P + W), one for every head
        self.kept = valid.reshape(-1).nonzero().squeeze(1)  # the real query slots, flat order
        # token 0 of a row is predicted by its prompt's last position, token j by input j - 1
        # (each row has one output more than inputs)
        is_first = torch.zeros(inputs + self.rows, dtype=torch.bool, device=device)
        is_first[starts + _arange(self.rows, device)] = True
        self.outputs = torch.empty(inputs + self.rows, dtype=torch.long, device=device)
        self.outputs[is_first] = owner * p + p - 1
        self.outputs[~is_first] = first + _arange(inputs, device)


def _longs(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=device)


def _arange(n: int, device: torch.device) -> torch.Tensor:
    return torch.arange(n, dtype=torch.long, device=device)


def _heads(x: torch.Tensor, count: int, dim: int) -> torch.Tensor:
    return x.view(x.shape[0], count, dim)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x cos + rotate_half(x) sin, as the model's ``apply_rotary_pos_emb``: x (T, heads, Dh)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _attention(
    layer: Any, x: torch.Tensor, rope: tuple[torch.Tensor, ...], at: _Layout
) -> torch.Tensor:
    """The layer's self-attention output before o_proj for every flat token: (T, H * Dh)."""
    attn = layer.self_attn
    d = int(attn.head_dim)
    q = _heads(attn.q_proj(x), -1, d)
    k = _heads(attn.k_proj(x), -1, d)
    v = _heads(attn.v_proj(x), -1, d)
    hq, kv = q.shape[1], k.shape[1]
    cos, sin = rope
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    if kv != hq:  # grouped key/value heads: each serves hq / kv query heads
        k, v = k.repeat_interleave(hq // kv, dim=1), v.repeat_interleave(hq // kv, dim=1)
    u, p, r, w = at.prompts, at.prompt_len, at.rows, at.width
    first = u * p
    # the prompts over themselves
    qp, kp, vp = (t[:first].view(u, p, hq, d).transpose(1, 2) for t in (q, k, v))
    out_p = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=attn.scaling)
    out_p = out_p.transpose(1, 2).reshape(first, hq * d)
    # the answers over their prompt and their own earlier tokens
    qa = q.index_select(0, at.query_index).view(r, w, hq, d).transpose(1, 2)
    ka = k.index_select(0, at.key_index).view(r, p + w, hq, d).transpose(1, 2)
    va = v.index_select(0, at.key_index).view(r, p + w, hq, d).transpose(1, 2)
    out_a = F.scaled_dot_product_attention(qa, ka, va, attn_mask=at.mask, scale=attn.scaling)
    out_a = out_a.transpose(1, 2).reshape(r * w, hq * d).index_select(0, at.kept)
    return torch.cat([out_p, out_a])


def packed_hidden(body: Any, seqs: Sequences, device: torch.device) -> torch.Tensor:
    """Final hidden states at the positions that predict each answer token, flat in (answer,
    position) order (N, D), as the padded forward gives them. ``seqs`` must be shareable
    (:func:`gmts_core.stats.shared_prompts.shareable`) and ``body`` plain Llama layout."""
    at = _Layout(seqs, device)
    h = body.embed_tokens(at.ids)  # (T, D)
    length = at.prompt_len + at.width
    span = torch.arange(length, device=device)[None]
    cos, sin = body.rotary_emb(h[None], span)  # (1, P + W, Dh) each, in h's dtype
    rope = (
        cos[0].index_select(0, at.positions)[:, None],
        sin[0].index_select(0, at.positions)[:, None],
    )
    for layer in body.layers:
        h = h + layer.self_attn.o_proj(_attention(layer, layer.input_layernorm(h), rope, at))
        mlp = layer.mlp
        x = layer.post_attention_layernorm(h)
        h = h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
    return body.norm(h.index_select(0, at.outputs))


def serves(body: Any, padded: Any, pad_id: int) -> bool:
    """Whether :func:`packed_hidden` runs this body: plain Llama layout and not in training mode
    (dropout), checked on every call (so an adapter or a hook added after the probe is never
    bypassed), and its hidden states equal the padded forward's (``padded(body, seqs, pad_id,
    device)``) within the load-time tolerance of :mod:`gmts_core.model.logit_head` on a probe
    batch (two prompts of four tokens; answers of 3, 1 and 2 tokens), probed once per body."""
    if getattr(body, "training", False) or not is_plain_llama(body):
        return False
    with _LOCK:
        if body in _VERDICTS:
            return _VERDICTS[body]
    verdict = matches_padded(body, packed_hidden, padded, pad_id)
    with _LOCK:
        _VERDICTS[body] = verdict
    return verdict
