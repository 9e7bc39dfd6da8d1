"""The packed training forward: the same hidden states and parameter gradients (autograd) as the
padded forward over every full sequence, on Llama and Qwen2 layouts of other shapes (grouped
key/value heads, biases, a scaled RoPE, one-token answers); bodies it does not know keep the
model's own forward."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from gmts_core.model.llama_layout import is_plain_llama
from gmts_core.model.loading import LoadedModel
from gmts_core.model.logit_head import head_path
from gmts_core.stats import forward, packed_forward
from gmts_core.stats.forward import _answer_hidden, answer_logits
from gmts_core.stats.packed_forward import packed_hidden, serves

PAD = 0


def _tiny(model: Any, config: Any, seed: int, **settings: Any) -> Any:
    """A tiny random causal LM of this class (2 layers, 4 query heads, vocabulary 61)."""
    base = {
        "vocab_size": 61,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
        "pad_token_id": PAD,
    }
    torch.manual_seed(seed)
    return model(config(**(base | settings))).eval()


def _llama(**overrides: Any) -> Any:
    return _tiny(LlamaForCausalLM, LlamaConfig, 0, **({"num_key_value_heads": 2} | overrides))


MODELS: dict[str, Callable[[], Any]] = {
    "llama-gqa": _llama,
    "llama-biases": lambda: _llama(attention_bias=True, mlp_bias=True, num_key_value_heads=4),
    "llama-linear-rope": lambda: _llama(
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    ),
    "qwen2-mqa": lambda: _tiny(Qwen2ForCausalLM, Qwen2Config, 1, num_key_value_heads=1),
}


def _batch(vocab: int, prompt_len: int = 5, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Three prompts of ``prompt_len`` tokens with 1-9 token answers (a one-token answer and a
    prompt with a single answer among them), in mixed order."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, vocab, (prompt_len,), generator=g).tolist() for _ in range(3)]
    lengths = [(0, 4), (1, 1), (0, 9), (2, 3), (1, 6), (0, 1), (1, 2)]
    return [(prompts[p], torch.randint(1, vocab, (n,), generator=g).tolist()) for p, n in lengths]


def _hidden_and_grads(
    body: Any, run: Callable[[], torch.Tensor]
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    params = [p for p in body.parameters() if p.is_floating_point()]
    for p in params:
        p.requires_grad_(True)
        p.grad = None
    with torch.enable_grad():
        hidden = run()
        weights = torch.linspace(-1, 1, hidden.numel(), dtype=hidden.dtype).view_as(hidden)
        (hidden * weights).sum().backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]
    for p in params:
        p.requires_grad_(False)
        p.grad = None
    return hidden.detach(), grads


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hidden_states_and_gradients_equal_the_padded_forwards(name: str) -> None:
    """In float32 (the models' norms compute in float32 whatever the weights' dtype, so a
    float64 model's gradients are float32-accurate on every path alike)."""
    model = MODELS[name]()
    body = head_path(model).body
    assert is_plain_llama(body)
    cpu = torch.device("cpu")
    for prompt_len, seed in ((5, 0), (1, 1), (12, 2)):
        seqs = _batch(model.config.vocab_size, prompt_len, seed)
        ours, ours_grads = _hidden_and_grads(body, partial(packed_hidden, body, seqs, cpu))
        theirs, theirs_grads = _hidden_and_grads(
            body, partial(_answer_hidden, body, seqs, PAD, cpu)
        )
        assert ours.shape == theirs.shape == (sum(len(a) for _, a in seqs), 32)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        assert len(ours_grads) == len(theirs_grads) > 0
        for a, b in zip(ours_grads, theirs_grads, strict=True):
            assert float(b.abs().max()) > 0
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))
    assert serves(body, _answer_hidden, PAD)


def test_the_training_forward_takes_the_packed_path_with_the_padded_logits(
    tiny_lm: Callable[[str], LoadedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = tiny_lm("llama")
    seqs = _batch(lm.model.config.vocab_size, seed=3)
    pad = lm.tokenizer.pad_token_id
    assert serves(head_path(lm.model).body, _answer_hidden, pad)  # probed (runs it) once
    calls: list[int] = []
    real = packed_forward.packed_hidden
    monkeypatch.setattr(packed_forward, "packed_hidden", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        _, packed = answer_logits(lm.model, seqs, pad, share_prompts=True)
        _, padded = answer_logits(lm.model, seqs, pad)
    assert calls == [1]  # the padded call (share_prompts off) never packs
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)


def test_bodies_it_does_not_know_keep_the_models_forward(
    tiny_lm: Callable[[str], LoadedModel],
) -> None:
    gpt2 = head_path(tiny_lm("gpt2").model).body
    assert not is_plain_llama(gpt2) and not serves(gpt2, _answer_hidden, PAD)
    hooked = _llama()
    body = head_path(hooked).body
    body.layers[0].mlp.up_proj.register_forward_hook(lambda *_: None)  # e.g. an adapter's hook
    assert not is_plain_llama(body) and not serves(body, _answer_hidden, PAD)
    training = _llama()
    training.train()
    assert not serves(head_path(training).body, _answer_hidden, PAD)  # dropout


def test_an_adapter_added_after_the_probe_is_never_bypassed() -> None:
    """The probe's verdict is kept per body, but the layout is checked on every call: a hook or
    a replaced projection added later (as an adapter library adds them) sends the training
    forward back to the model's own forward, which runs them."""
    model = _llama()
    body = head_path(model).body
    assert serves(body, _answer_hidden, PAD)
    seqs = _batch(model.config.vocab_size)
    with torch.no_grad():
        before = answer_logits(model, seqs, PAD, share_prompts=True)[1]
    handle = body.layers[1].self_attn.v_proj.register_forward_hook(lambda m, i, out: out * 2)
    assert not serves(body, _answer_hidden, PAD)
    with torch.no_grad():
        hooked = answer_logits(model, seqs, PAD, share_prompts=True)[1]
        padded = answer_logits(model, seqs, PAD)[1]
    assert not torch.allclose(hooked, before)  # the hook ran
    torch.testing.assert_close(hooked, padded, rtol=1e-5, atol=1e-5)
    handle.remove()
    assert serves(body, _answer_hidden, PAD)


def test_a_body_whose_packed_path_differs_is_not_served() -> None:
    """The probe compares with the padded forward it is given: one that disagrees (here shifted
    by 1) makes it refuse the packed path, and the training forward then uses the cached one."""
    model = _llama()
    body = head_path(model).body

    def shifted(*args: object) -> torch.Tensor:
        return _answer_hidden(*args) + 1.0  # type: ignore[arg-type]

    assert not serves(body, shifted, PAD)
    seqs = _batch(model.config.vocab_size)
    with torch.no_grad():
        _, shared = forward.answer_logits(model, seqs, PAD, share_prompts=True)
        _, padded = forward.answer_logits(model, seqs, PAD)
    torch.testing.assert_close(shared, padded, rtol=1e-5, atol=1e-5)
