"""One fused decoding step for Llama-layout models: the sampler's decode step without the
framework around the model's modules.

A transformers forward of one new token per row runs each layer's modules through keyword
plumbing, mask construction, output containers and decorators; on a small model that costs more
than the arithmetic (the bundled demo model: about 60 % of a decoding step). For the layouts
this module knows (Llama, Qwen2: RMSNorm, rotary attention with grouped key/value heads, a
gated MLP), :class:`FusedStep` runs the same modules' weights directly, reading and writing the
sampler's pre-allocated cache (:class:`gmts_core.model.kv_cache.PreallocatedLayer`, filled by the
model's own prefill). The model's own RMSNorm, rotary embedding and activation modules are
called, so their variants (rope scaling, norm epsilon) are the model's; the attention of one
query is a weighted sum over the cached keys and values.

It serves a model only when every piece is the plain one (``nn.Linear`` without hooks, so an
offloading wrapper is never bypassed), or a plain PEFT LoRA layer on one, whose adapter is merged
into the weights the step uses (:mod:`gmts_core.model.lora_merge`: a LoRA policy then samples
at the base model's cost, not through PEFT's per-projection forward); the sampler's probe then
checks its logits against the model's teacher-forced forward
(:func:`gmts_core.sampling.sampler_probe.probe_difference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from gmts_core import native
from gmts_core.model.kv_cache import PreallocatedLayer
from gmts_core.model.llama_layout import NORMS, is_plain_llama
from gmts_core.model.lora_merge import linear_weights, mergeable_linear

SILU = ("SiLUActivation", "SiLU")  # gates the native step computes itself
MAX_PARAMETERS = 200_000_000  # larger bodies keep the generic step (no weight copies)


@dataclass
class _LayerWeights:
    """One decoder layer's weights as the fused step uses them: the query/key/value and
    gate/up projections concatenated into one matrix each (one matmul instead of three and
    two), taken from the live parameters at the start of each sampling call (a LoRA adapter
    merged in: :func:`gmts_core.model.lora_merge.linear_weights`)."""

    norm1: torch.Tensor
    eps1: float
    qkv: torch.Tensor  # (H * Dh + 2 * KV * Dh, D)
    qkv_bias: torch.Tensor | None
    splits: tuple[int, int, int]  # query, key, value widths
    out: torch.Tensor
    out_bias: torch.Tensor | None
    norm2: torch.Tensor
    eps2: float
    gate_up: torch.Tensor  # (2 * I, D)
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None
    act: Any


def _cat(*linears: Any) -> tuple[torch.Tensor, torch.Tensor | None, tuple[int, ...]]:
    """The projections' weights (a LoRA adapter merged in) stacked, their biases (zeros for
    those without; None when none has one) and their output widths."""
    pairs = [linear_weights(m) for m in linears]
    weight = torch.cat([w for w, _ in pairs])
    widths = tuple(int(w.shape[0]) for w, _ in pairs)
    if all(b is None for _, b in pairs):
        return weight, None, widths
    bias = torch.cat([w.new_zeros(w.shape[0]) if b is None else b for w, b in pairs])
    return weight, bias, widths


def _weights(layer: Any) -> _LayerWeights:
    attn, mlp = layer.self_attn, layer.mlp
    qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
    qkv_weight, qkv_bias, (q, k, v) = _cat(*qkv)
    gate_up, gate_up_bias, _ = _cat(mlp.gate_proj, mlp.up_proj)
    return _LayerWeights(
        layer.input_layernorm.weight,
        float(layer.input_layernorm.variance_epsilon),
        qkv_weight,
        qkv_bias,
        (q, k, v),
        *linear_weights(attn.o_proj),
        layer.post_attention_layernorm.weight,
        float(layer.post_attention_layernorm.variance_epsilon),
        gate_up,
        gate_up_bias,
        *linear_weights(mlp.down_proj),
        mlp.act_fn,
    )


def _rms(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama's and Qwen2's modules compute it (in float32, then the input dtype), as
    one fused kernel."""
    if h.dtype == torch.float32:
        return F.rms_norm(h, (h.shape[-1],), weight, eps)
    return weight * F.rms_norm(h.float(), (h.shape[-1],), None, eps).to(h.dtype)


def _add_linear(h: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: Any) -> torch.Tensor:
    """h + linear(x): the residual add fused into the matmul where there is no bias."""
    if bias is None:
        return torch.addmm(h, x, weight.t())
    return h + F.linear(x, weight, bias)


class FusedStep:
    """``step(tokens, cache)`` -> the last hidden states (n, D) after one new token per row."""

    def __init__(self, body: Any) -> None:
        self.body = body
        first = body.layers[0].self_attn
        self.head_dim = int(first.head_dim)
        self.scaling = float(first.scaling)
        self.layers = [_weights(layer) for layer in body.layers]
        self._rope: tuple[torch.Tensor, ...] | None = None
        self._swap: torch.Tensor | None = None
        # what the native kernels compute themselves: SiLU gates, and the final RMSNorm
        self.native_gates = all(type(w.act).__name__ in SILU for w in self.layers)
        self.native_norm = type(getattr(body, "norm", None)).__name__ in NORMS
        # the softmax's dtype as the model's attention computes it: SDPA in the scores' own
        # (float64 too), eager in float32 (a float64 model in float32 failed the sampler's
        # probe, whose float64 tolerance is 1e-8, by 3e-8: it was sampled by generate)
        eager = getattr(body.config, "_attn_implementation", None) == "eager"
        self.native_softmax = (torch.float32,) if eager else (torch.float32, torch.float64)

    @staticmethod
    def of(body: Any) -> FusedStep | None:
        """The fused step for this transformer body, or None if it is not the plain Llama
        layout (:func:`gmts_core.model.llama_layout.is_plain_llama`; plain LoRA adapters are
        merged, :mod:`gmts_core.model.lora_merge`) or too large."""
        return FusedStep(body) if FusedStep.serves(body) else None

    @staticmethod
    def serves(body: Any) -> bool:
        """Whether :meth:`of` gives a fused step for this body (without building it)."""
        if not is_plain_llama(body, mergeable_linear):
            return False
        # larger bodies: the concatenated projections would copy too much
        return sum(p.numel() for p in body.parameters()) <= MAX_PARAMETERS

    def _rotary(self, length: int, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """cos, sin (length, Dh) for positions 0..length-1 from the model's rotary module, and
        the same scaled by the attention's 1 / sqrt(Dh) (folded into the query's rotation)."""
        if self._rope is None or self._rope[0].shape[0] < length:
            positions = torch.arange(length, device=h.device)[None]  # (1, L)
            cos, sin = self.body.rotary_emb(h[None, :1], positions)  # (1, L, Dh)
            cos, sin = cos[0].to(h.dtype), sin[0].to(h.dtype)
            self._rope = (cos, sin, cos * self.scaling, sin * self.scaling)
        return self._rope

    def _rotations(
        self, positions: int | torch.Tensor, length: int, h: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Matrices R with x @ R = x cos + rotate_half(x) sin at ``positions`` (one position:
        (Dh, Dh); a tensor of one per row: (n, Dh, Dh)), rotate_half(x) = cat(-x[h:], x[:h]):
        the query's (times the attention's scaling) and the key's. The rotary embedding is then
        one matmul per projection."""
        cos, sin, cos_q, sin_q = (x[positions] for x in self._rotary(length, h))
        if self._swap is None or self._swap.dtype != h.dtype:
            d = self.head_dim
            half, idx = d // 2, torch.arange(d // 2, device=h.device)
            swap = torch.zeros(d, d, dtype=h.dtype, device=h.device)  # the rotate_half map
            swap[idx + half, idx] = -1.0
            swap[idx, idx + half] = 1.0
            self._swap = swap
        # swap[r, c] * sin[c]: the sines scale the map's columns (one set per row, if per row)
        rot_q = torch.addcmul(torch.diag_embed(cos_q), self._swap, sin_q.unsqueeze(-2))
        rot_k = torch.addcmul(torch.diag_embed(cos), self._swap, sin.unsqueeze(-2))
        return rot_q, rot_k

    def __call__(
        self, tokens: torch.Tensor, cache: Any, starts: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``starts`` (n,): each row's first cache slot, when prompts of different lengths were
        prefilled right-aligned (:func:`gmts_core.sampling.kv_sampler.decode`); a row's slot s
        then holds its position s - start, and its slots before the start are never read."""
        layers = cache.layers
        if not all(isinstance(layer, PreallocatedLayer) for layer in layers):
            raise ValueError("the fused step needs the pre-allocated cache")
        pos = layers[0].length
        h = self.body.embed_tokens(tokens)  # (n, D)
        final: torch.Tensor | None = None
        kernels = self._native(h, layers, pos)
        if kernels is not None:
            h = self._native_layers(kernels, h, layers, pos, starts)
            if self.native_norm:
                norm = self.body.norm
                final = kernels.rms_norm(h, norm.weight, float(norm.variance_epsilon))
        else:
            positions = pos if starts is None else pos - starts
            rot_q, rot_k = self._rotations(positions, layers[0].max_length, h)
            for w, kv in zip(self.layers, layers, strict=True):
                x = _rms(h, w.norm1, w.eps1)
                heads = self._attention(w, x, kv, pos, (rot_q, rot_k), starts)
                h = _add_linear(h, heads, w.out, w.out_bias)
                x = _rms(h, w.norm2, w.eps2)
                gate, up = F.linear(x, w.gate_up, w.gate_up_bias).chunk(2, -1)
                h = _add_linear(h, w.act(gate) * up, w.down, w.down_bias)
        for kv in layers:
            kv.length = pos + 1
            kv._refresh_views()
        return self.body.norm(h) if final is None else final  # (n, D)

    def _native(self, h: torch.Tensor, layers: list[Any], pos: int) -> native.DecodeKernels | None:
        """The native kernels, when they take this step: float32 on CPU (activations, norm
        weights, cache buffers, all contiguous), SiLU gates, and the position within the
        kernels' score buffer, with no gradient to record (the kernels keep no graph); else
        None."""
        if not (
            not torch.is_grad_enabled()
            and h.dtype == torch.float32
            and h.device.type == "cpu"
            and pos < native.MAX_KEYS
            and self.native_gates
        ):
            return None
        tensors = [t for w in self.layers for t in (w.norm1, w.norm2)]
        if self.native_norm:
            tensors.append(self.body.norm.weight)
        for kv in layers:
            if kv._key_buffer is None or kv._value_buffer is None:
                return None
            tensors += [kv._key_buffer, kv._value_buffer]
        if not all(
            t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous()
            for t in tensors
        ):
            return None
        return native.decode_kernels()

    def _native_layers(
        self,
        kernels: native.DecodeKernels,
        h: torch.Tensor,
        layers: list[Any],
        pos: int,
        starts: torch.Tensor | None,
    ) -> torch.Tensor:
        """The layers with the C kernels for the norms, the rotary attention with its cache
        writes, the gate and the projections (:mod:`gmts_core.native`; the projections' residual
        adds are written into ``h``, the step's own embedding output)."""
        cos, sin, _, _ = self._rotary(layers[0].max_length, h)  # the tables (L, Dh)
        d = self.head_dim
        for w, kv in zip(self.layers, layers, strict=True):
            qkv = kernels.linear(kernels.rms_norm(h, w.norm1, w.eps1), w.qkv, w.qkv_bias)
            heads = kernels.rotary_attend(
                qkv,
                (w.splits[0] // d, w.splits[1] // d, d),
                (cos, sin, self.scaling),
                (kv._key_buffer, kv._value_buffer),
                pos,
                starts,
            )
            h = kernels.linear(heads, w.out, w.out_bias, into=h)
            x = kernels.rms_norm(h, w.norm2, w.eps2)
            gated = kernels.silu_mul(kernels.linear(x, w.gate_up, w.gate_up_bias))
            h = kernels.linear(gated, w.down, w.down_bias, into=h)
        return h

    def _attention(
        self,
        w: _LayerWeights,
        x: torch.Tensor,
        kv: PreallocatedLayer,
        pos: int,
        rotations: tuple[torch.Tensor, torch.Tensor],
        starts: torch.Tensor | None,
    ) -> torch.Tensor:
        """One query per row over the cache's filled slots (from its start, if ``starts``);
        writes this slot's k, v. Returns the heads' outputs (n, H * Dh), before the output
        projection."""
        n, d = x.shape[0], self.head_dim
        rot_q, rot_k = rotations  # (Dh, Dh), or (n, Dh, Dh) with a position per row
        q, k, v = F.linear(x, w.qkv, w.qkv_bias).split(w.splits, dim=-1)
        q = torch.matmul(q.view(n, -1, d), rot_q)  # (n, H, Dh) rotated, times the scaling
        assert kv._key_buffer is not None and kv._value_buffer is not None
        groups, length = kv._key_buffer.shape[1], pos + 1
        kv._key_buffer[:, :, pos] = torch.matmul(k.view(n, groups, d), rot_k)
        kv._value_buffer[:, :, pos] = v.view(n, groups, d)
        # (n * KV, T, Dh) views of the cache, every query head of a key/value group in one
        # entry: the native kernel's loop (gmts_core.native), else one batched matmul per
        # product (batched matmuls beat SDPA for one query on CPU)
        keys = kv._key_buffer[:, :, :length].view(n * groups, length, d)
        values = kv._value_buffer[:, :, :length].view(n * groups, length, d)
        q = q.view(n * groups, -1, d)  # (n * KV, g, Dh)
        if starts is None:
            heads = native.attend_one(q, keys, values)  # the C loop, where it takes the layout
            if heads is not None:
                return heads.view(n, -1)
        scores = torch.bmm(q, keys.transpose(1, 2))  # (n * KV, g, T)
        if starts is not None:  # a row's slots before its start hold no key of its own
            before = torch.arange(length, device=x.device) < starts[:, None]  # (n, T)
            scores = scores.masked_fill(before.repeat_interleave(groups, 0)[:, None], -torch.inf)
        if scores.dtype in self.native_softmax:  # else in float32 (half precisions; eager)
            probs = torch.softmax(scores, dim=-1)
        else:
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return torch.bmm(probs, values).view(n, -1)  # (n, H * Dh)
