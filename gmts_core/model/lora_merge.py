"""A linear layer's effective weight, with a PEFT LoRA adapter merged into it (for sampling).

A PEFT LoRA ``Linear`` computes ``base(x) + B(A(dropout(x))) * scaling`` per active adapter.
In a decoding step of a few rows that is two extra tiny matmuls, a dropout call, a scale and an
add per projection (7 projections x 30 layers on SmolLM2), each through PEFT's Python forward;
on CPU that framework work costs several times the step's arithmetic. With the adapter merged,
``W + B @ A * scaling`` (PEFT's own :meth:`get_delta_weight`), a projection is one matmul again,
and the sampler's fused step (:mod:`gmts_core.sampling.fused_decode`) serves the LoRA policy as
it serves the base model.

The merged weight is a new tensor, computed from the live adapter at the start of each sampling
call: the model's own weights are never modified (nothing to unmerge, no drift after an update),
and a training step always samples from its current adapter. Merging changes only float
rounding: ``x @ (W + dW).T`` and ``x @ W.T + (x @ A.T) @ B.T * s`` agree within float32 rounding
(the sampler's probe, :mod:`gmts_core.sampling.sampler_probe`, compares the merged step's
logits with the adapter's own forward on every model before serving it).

Only plain LoRA is merged: no DoRA or other variant, no LoRA bias, a plain ``nn.Linear`` base
layer, dropout inactive. Anything else is not merged (the generic forward keeps serving it).
"""

from __future__ import annotations

from typing import Any

import torch

from gmts_core.model.llama_layout import plain_linear


def _dropout_inactive(dropout: Any) -> bool:
    return isinstance(dropout, torch.nn.Identity) or (
        isinstance(dropout, torch.nn.Dropout) and not dropout.training
    )


def _adapters(module: Any) -> list[str]:
    """The active adapters that contribute to ``module``'s output."""
    return [a for a in module.active_adapters if a in module.lora_A]


def mergeable_lora(module: Any) -> bool:
    """True for a PEFT LoRA ``Linear`` whose output :func:`linear_weights` reproduces: plain
    LoRA on a plain ``nn.Linear``, no hooks, no variant (DoRA ...), no LoRA bias, no dropout."""
    if not type(module).__module__.startswith("peft.") or type(module).__name__ != "Linear":
        return False
    needed = ("base_layer", "lora_A", "lora_B", "scaling", "active_adapters", "get_delta_weight")
    if not all(hasattr(module, name) for name in needed):
        return False
    if module._forward_hooks or module._forward_pre_hooks or "forward" in vars(module):
        return False
    if not plain_linear(module.base_layer):
        return False
    if module.disable_adapters or module.merged:
        return True  # the base layer's output (with the merge, if PEFT merged it, already in)
    for adapter in _adapters(module):
        if adapter in getattr(module, "lora_variant", {}):
            return False
        if getattr(module, "lora_bias", {}).get(adapter, False):
            return False
        if getattr(module, "use_dora", {}).get(adapter, False):
            return False
        if not _dropout_inactive(module.lora_dropout[adapter]):
            return False
    return True


def mergeable_linear(module: Any) -> bool:
    """A plain ``nn.Linear`` or a :func:`mergeable_lora` layer."""
    return plain_linear(module) or mergeable_lora(module)


def linear_weights(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight (out, in), bias (out,) or None) of a plain ``nn.Linear`` (its own tensors) or of a
    :func:`mergeable_lora` layer (the base weight plus each active adapter's delta, a new
    tensor), detached: ``F.linear(x, *linear_weights(m))`` equals ``m(x)`` up to float rounding."""
    if plain_linear(module):
        return module.weight.detach(), None if module.bias is None else module.bias.detach()
    if not mergeable_lora(module):
        raise ValueError(f"{type(module).__name__} is neither a plain Linear nor a plain LoRA")
    base = module.base_layer
    bias = None if base.bias is None else base.bias.detach()
    weight = base.weight.detach()
    if module.disable_adapters or module.merged:
        return weight, bias
    with torch.no_grad():
        for adapter in _adapters(module):
            weight = weight + module.get_delta_weight(adapter).to(weight.dtype)  # (out, in)
    return weight, bias
