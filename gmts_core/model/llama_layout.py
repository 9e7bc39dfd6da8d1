"""Whether a transformer body is the plain Llama/Qwen2 layout that the library's own forwards
run directly (the sampler's fused decoding step, :mod:`gmts_core.sampling.fused_decode`, and the
packed training forward, :mod:`gmts_core.stats.packed_forward`): RMSNorm, rotary attention with
grouped key/value heads and no sliding window, a gated MLP, every projection a plain
``nn.Linear`` without hooks (so a PEFT adapter or an offloading wrapper is never bypassed), and a
RoPE whose frequencies do not depend on the forward's length."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gmts_core.model.rope_window import rope_window

LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer")
NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm")


def plain_linear(module: Any) -> bool:
    """An ``nn.Linear`` as torch defines it: no subclass, hooks or replaced forward."""
    return (
        type(module) is torch.nn.Linear
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and "forward" not in vars(module)
    )


def is_plain_llama(body: Any, linear_ok: Callable[[Any], bool] = plain_linear) -> bool:
    """True when every layer of ``body`` is the plain Llama/Qwen2 layout (see the module), each
    projection passing ``linear_ok`` (by default: a plain ``nn.Linear``; the sampler also takes
    plain LoRA layers, whose adapter it merges, :mod:`gmts_core.model.lora_merge`)."""
    layers = getattr(body, "layers", None)
    config = getattr(body, "config", None)
    if not layers or config is None or not hasattr(body, "rotary_emb"):
        return False
    if getattr(config, "use_sliding_window", False) or getattr(config, "pretraining_tp", 1) > 1:
        return False
    if rope_window(config) is not None:
        return False  # frequencies by forward length: one call for all positions would differ
    if body._forward_hooks or body._forward_pre_hooks:
        return False
    for layer in layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if type(layer).__name__ not in LAYERS or attn is None or mlp is None:
            return False
        if layer._forward_hooks or layer._forward_pre_hooks:
            return False
        if getattr(attn, "sliding_window", None) or hasattr(attn, "q_norm"):
            return False
        linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
        if not all(linear_ok(m) for m in (*linears, mlp.gate_proj, mlp.up_proj, mlp.down_proj)):
            return False
        norms = (layer.input_layernorm, layer.post_attention_layernorm)
        if not all(type(n).__name__ in NORMS for n in norms):
            return False
    return True
