"""One fused decoding step for Llama-layout models: the sampler's decode step without the
framework around the model's modules.

A transformers forward of one new token per row runs each layer's modules through keyword
plumbing, mask construction, output containers and decorators; on a small model that costs more
than the arithmetic (the bundled demo model: about 60 % of a decoding step). For the layouts
this module knows (Llama, Qwen2: RMSNorm, rotary attention with grouped key/value heads, a
gated MLP), :class:`FusedStep` runs the same modules' weights directly, reading and writing the
sampler's pre-allocated cache (:class:`gmts_core.kv_cache.PreallocatedLayer`, filled by the
model's own prefill). The model's own RMSNorm, rotary embedding and activation modules are
called, so their variants (rope scaling, norm epsilon) are the model's; the attention of one
query is a weighted sum over the cached keys and values.

It serves a model only when every piece is the plain one (``nn.Linear`` without hooks, so a
PEFT adapter or an offloading wrapper is never bypassed); the sampler's probe then checks its
logits against the model's teacher-forced forward (:func:`gmts_core.kv_sampler.probe_difference`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from gmts_core.kv_cache import PreallocatedLayer

LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer")
ELEMENTWISE_ATTENTION_MAX = 1 << 20  # n * H * T * D below which the attention is elementwise


def _plain(module: Any) -> bool:
    return (
        type(module) is torch.nn.Linear
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and "forward" not in vars(module)
    )


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FusedStep:
    """``step(tokens, cache)`` -> the last hidden states (n, D) after one new token per row."""

    def __init__(self, body: Any) -> None:
        self.body = body
        first = body.layers[0].self_attn
        self.head_dim = int(first.head_dim)
        self.scaling = float(first.scaling)

    @staticmethod
    def of(body: Any) -> FusedStep | None:
        """The fused step for this transformer body, or None if it is not a known layout."""
        layers = getattr(body, "layers", None)
        config = getattr(body, "config", None)
        if not layers or config is None or not hasattr(body, "rotary_emb"):
            return None
        if getattr(config, "use_sliding_window", False) or getattr(config, "pretraining_tp", 1) > 1:
            return None
        if body._forward_hooks or body._forward_pre_hooks:
            return None
        for layer in layers:
            attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
            if type(layer).__name__ not in LAYERS or attn is None or mlp is None:
                return None
            if layer._forward_hooks or layer._forward_pre_hooks:
                return None
            if getattr(attn, "sliding_window", None) or hasattr(attn, "q_norm"):
                return None
            linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
            if not all(_plain(m) for m in (*linears, mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
                return None
        return FusedStep(body)

    def __call__(self, tokens: torch.Tensor, cache: Any) -> torch.Tensor:
        layers = cache.layers
        if not all(isinstance(layer, PreallocatedLayer) for layer in layers):
            raise ValueError("the fused step needs the pre-allocated cache")
        pos = layers[0].length
        h = self.body.embed_tokens(tokens)  # (n, D)
        position = torch.full((1, 1), pos, dtype=torch.long, device=h.device)
        cos, sin = self.body.rotary_emb(h[None], position)  # (1, 1, Dh) each
        cos, sin = cos[0], sin[0]  # (1, Dh): broadcast over rows and heads
        for layer, kv in zip(self.body.layers, layers, strict=True):
            h = h + self._attention(layer.self_attn, layer.input_layernorm(h), kv, pos, cos, sin)
            mlp = layer.mlp
            x = layer.post_attention_layernorm(h)
            gate = mlp.act_fn(F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias))
            up = F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias)
            h = h + F.linear(gate * up, mlp.down_proj.weight, mlp.down_proj.bias)
        for kv in layers:
            kv.length = pos + 1
            kv._refresh_views()
        return self.body.norm(h)  # (n, D)

    def _attention(
        self,
        attn: Any,
        x: torch.Tensor,
        kv: PreallocatedLayer,
        pos: int,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """One query per row over the cache's ``pos + 1`` keys; writes this position's k, v."""
        n, d = x.shape[0], self.head_dim
        q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias).view(n, -1, d)  # (n, H, Dh)
        k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias).view(n, -1, d)  # (n, KV, Dh)
        v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias).view(n, -1, d)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        assert kv._key_buffer is not None and kv._value_buffer is not None
        kv._key_buffer[:, :, pos] = k
        kv._value_buffer[:, :, pos] = v
        keys = kv._key_buffer[:, :, : pos + 1]  # (n, KV, T, Dh)
        values = kv._value_buffer[:, :, : pos + 1]
        heads, groups = q.shape[1], keys.shape[1]
        q = q.view(n, groups, heads // groups, 1, d)  # (n, KV, g, 1, Dh)
        if n * heads * (pos + 1) * d <= ELEMENTWISE_ATTENTION_MAX:
            scores = (q * keys[:, :, None]).sum(-1) * self.scaling  # (n, KV, g, T)
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            out = (probs[..., None] * values[:, :, None]).sum(-2)  # (n, KV, g, Dh)
        else:
            scores = torch.matmul(q, keys[:, :, None].transpose(-1, -2)) * self.scaling
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)  # (n, KV, g, 1, T)
            out = torch.matmul(probs, values[:, :, None])[:, :, :, 0]  # (n, KV, g, Dh)
        return F.linear(out.reshape(n, heads * d), attn.o_proj.weight, attn.o_proj.bias)
