"""The fused decoding step: its rotary matmul is the model's rotary embedding, and it serves the
Llama-layout families (grouped key/value heads, Qwen2's projection biases) and LoRA policies on
them (adapter merged) with the model's own logits, step after step."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from gmts_core.grpo.policy import PolicySettings, TrainablePolicy, weights_checksum
from gmts_core.model.kv_cache import repeat_rows, sampling_cache
from gmts_core.model.loading import LoadedModel
from gmts_core.model.logit_head import head_path
from gmts_core.sampling.fused_decode import FusedStep


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_rotation_is_the_rotary_embedding(arch: str, tiny_lm: Callable[[str], LoadedModel]) -> None:
    """x @ R(pos) = x cos + rotate_half(x) sin (the query's R also times 1 / sqrt(Dh))."""
    step = FusedStep.of(tiny_lm(arch).model.model)
    assert step is not None
    x = torch.randn(5, 3, step.head_dim, dtype=torch.float64)
    h = torch.zeros(1, 1)
    for pos in (0, 1, 7, 19):
        rot_q, rot_k = step._rotations(pos, 20, h)
        cos, sin = step._rotary(20, h)[:2]
        naive = x.float() * cos[pos] + _rotate_half(x.float()) * sin[pos]
        torch.testing.assert_close(x.float() @ rot_k, naive, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(x.float() @ rot_q, naive * step.scaling, rtol=1e-6, atol=1e-6)


@pytest.mark.usefixtures("native_path")  # the attention by the C loop and by batched matmuls
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_fused_steps_equal_the_models_own_cached_steps(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    """Ten steps of 6 rows (3 prompts x 2) through the fused step and through the model's body
    with a cache: the same hidden states, to float32 rounding."""
    lm = tiny_lm(arch)
    body = head_path(lm.model).body
    fused = FusedStep.of(body)
    assert fused is not None
    ids = torch.randint(
        3, lm.model.config.vocab_size, (3, 5), generator=torch.Generator().manual_seed(1)
    )
    tokens = torch.randint(
        3, lm.model.config.vocab_size, (10, 6), generator=torch.Generator().manual_seed(2)
    )
    with torch.no_grad():
        caches = [sampling_cache(lm.model.config, 16) for _ in range(2)]
        for cache in caches:
            body(input_ids=ids, use_cache=True, cache=cache)
            repeat_rows(cache, 2)
        for step_tokens in tokens:
            ours = fused(step_tokens, caches[0])
            theirs = body(input_ids=step_tokens[:, None], use_cache=True, cache=caches[1])[0][:, -1]
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("native_path")
def test_lora_policy_is_sampled_from_merged_weights(
    tiny_lm: Callable[[str], LoadedModel],
) -> None:
    """A LoRA policy (every linear layer adapted, B made non-zero) is served by the fused step
    with its adapter merged: ten steps equal PEFT's own cached steps to float32 rounding
    (|diff| <= 1e-5 + 1e-5 |x|, as the base model's), differ from the base model's, and leave
    the policy's and the base's weights as they were."""
    lm = tiny_lm("llama")
    policy = TrainablePolicy(lm, PolicySettings(kind="lora"))
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(4))
    before = policy.checksum(), weights_checksum(lm.model)
    body = head_path(policy.model).body
    fused = FusedStep.of(body)
    assert fused is not None
    base_fused = FusedStep.of(head_path(lm.model).body)
    assert base_fused is not None
    vocab = lm.model.config.vocab_size
    ids = torch.randint(3, vocab, (2, 5), generator=torch.Generator().manual_seed(1))
    tokens = torch.randint(3, vocab, (10, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        caches = [sampling_cache(lm.model.config, 16) for _ in range(3)]
        for cache, model_body in zip(caches, (body, body, head_path(lm.model).body), strict=True):
            model_body(input_ids=ids, use_cache=True, cache=cache)
            repeat_rows(cache, 2)
        for step_tokens in tokens:
            ours = fused(step_tokens, caches[0])
            peft = body(input_ids=step_tokens[:, None], use_cache=True, cache=caches[1])[0][:, -1]
            base = base_fused(step_tokens, caches[2])
            torch.testing.assert_close(ours, peft, rtol=1e-5, atol=1e-5)
            assert float((ours - base).abs().amax()) > 1e-3  # the adapter is in the step
    assert (policy.checksum(), weights_checksum(lm.model)) == before
