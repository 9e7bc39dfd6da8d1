"""Tiny random models of every causal-LM architecture the installed transformers knows.

``build_tiny(model_type)`` returns a float32 model with small hidden sizes, few layers and a
small vocabulary, or raises :class:`Skip` with the reason it cannot be built here (an
encoder-decoder, a multimodal model, a model that needs packages or remote code...). The
conformance tests (tests/gmts_core/model/test_arch_conformance.py) and the table of docs/concepts.md
use it.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import warnings
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

VOCAB = 96
HIDDEN = 32
HEADS = 4

# Small values for every size-like config key any architecture uses; only keys the config
# already has are set, so each architecture keeps its own structure.
_SMALL: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "n_embd": HIDDEN,
    "d_model": HIDDEN,
    "embed_dim": HIDDEN,
    "dim": HIDDEN,
    "intermediate_size": 64,
    "ffn_hidden_size": 64,
    "n_inner": 64,
    "d_ff": 64,
    "ffn_dim": 64,
    "num_hidden_layers": 4,  # hybrids need one attention layer among their linear ones
    "n_layer": 2,
    "num_layers": 2,
    "n_layers": 2,
    "num_attention_heads": HEADS,
    "n_head": HEADS,
    "n_heads": HEADS,
    "num_heads": HEADS,
    "num_key_value_heads": HEADS,
    "n_kv_heads": HEADS,
    "num_kv_heads": HEADS,
    "rotary_dim": HIDDEN // HEADS,
    "head_dim": HIDDEN // HEADS,
    "max_position_embeddings": 128,
    "n_positions": 128,
    "n_ctx": 128,
    "seq_length": 128,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "sliding_window": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "use_cache": True,
    "tie_word_embeddings": False,
}

# Architectures built with one extra key that their tests also set; the key is named.
_EXTRA: dict[str, dict[str, Any]] = {
    "granite": {"logits_scaling": 4.0},
    "cohere": {"logit_scale": 0.25},
    "gemma2": {"final_logit_softcapping": 0.5},  # small, so that the soft-cap really bends
    "gemma3_text": {"final_logit_softcapping": 0.5},
    "hyperclovax": {"logits_scaling": 3.0},
    "falcon_h1": {"lm_head_multiplier": 0.5},
    "minicpm3": {"dim_model_base": 8},
}
# BERT-style encoders in the causal-LM mapping decode only with is_decoder=True.
_DECODER_FLAG = {"is_decoder": True}


class Skip(Exception):
    """This architecture cannot be built as a tiny decoder-only model here; ``str`` says why."""


def causal_lm_types() -> list[str]:
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def out_of_scope(model_type: str) -> str | None:
    """Why ``model_type`` is outside what the tool analyses (an encoder-decoder, or a multimodal
    model whose text model is another entry of the mapping), from its default config; None when
    it is a decoder-only language model. Out-of-scope architectures are listed, not tested."""
    try:
        with _quiet():
            config = AutoConfig.for_model(model_type)
    except Exception:  # noqa: BLE001 - in scope; tiny_config states why it cannot be built
        return None
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if config.to_dict().get("text_config") is not None or hasattr(config, "vision_config"):
        return "multimodal (text, vision or audio sub-configs)"
    return None


@functools.cache
def in_scope_types() -> list[str]:
    """The decoder-only architectures of the mapping: the ones the conformance tests run on."""
    return [t for t in causal_lm_types() if out_of_scope(t) is None]


def _quiet() -> contextlib.AbstractContextManager[Any]:
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return stack


def tiny_config(model_type: str) -> Any:
    """A small config of ``model_type``, or Skip with the reason."""
    try:
        config = AutoConfig.for_model(model_type)
    except Exception as exc:  # noqa: BLE001 - any failure is a stated skip
        raise Skip(f"its default config cannot be made ({type(exc).__name__})") from None
    scope = out_of_scope(model_type)
    if scope is not None:
        raise Skip(scope)
    try:
        for key, value in _SMALL.items():
            if hasattr(config, key) and not isinstance(getattr(config, key), dict | list):
                setattr(config, key, value)
        for key, value in {**_DECODER_FLAG, **_EXTRA.get(model_type, {})}.items():
            if hasattr(config, key) or model_type in _EXTRA:
                setattr(config, key, value)
    except Exception as exc:  # noqa: BLE001 - e.g. heterogeneous per-layer configs
        raise Skip(f"config cannot be made tiny generically ({type(exc).__name__})") from None
    return config


MAX_PARAMETERS = 2_000_000
PROBE_TOKENS = 8


def build_tiny(model_type: str) -> torch.nn.Module:
    """A float32 tiny random model of ``model_type`` in eval mode, or Skip."""
    config = tiny_config(model_type)
    with _quiet(), torch.device("meta"):  # count first: some sub-modules ignore the small keys
        try:
            size = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
        except Exception:  # noqa: BLE001 - reported by the real build below
            size = 0
    if size > MAX_PARAMETERS:
        raise Skip(f"not tiny with generic small sizes ({size / 1e6:.0f}M parameters)")
    with _quiet(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        except ImportError as exc:
            raise Skip(f"needs an extra package ({str(exc).splitlines()[0][:80]})") from None
        except Exception as exc:  # noqa: BLE001 - any build failure is a stated skip
            raise Skip(f"cannot be built from a tiny config ({type(exc).__name__})") from None
    model.eval()
    if not getattr(model, "base_model_prefix", None) or model.get_output_embeddings() is None:
        raise Skip("no separate transformer body and LM head")
    model.requires_grad_(False)
    try:
        with torch.no_grad(), _quiet():
            model(input_ids=torch.arange(3, 3 + PROBE_TOKENS)[None], use_cache=False)
    except Exception as exc:  # noqa: BLE001 - the model itself fails: not ours to verify
        raise Skip(f"its own forward fails on the tiny config ({type(exc).__name__})") from None
    return model


def outcome(model_type: str) -> tuple[str, Any]:
    """("skipped", reason) | ("refused", message) | ("verified", model) for one architecture."""
    from gmts_core.model.logit_head import UnsupportedArchitectureError, check_head_path

    try:
        model = build_tiny(model_type)
    except Skip as why:
        return "skipped", str(why)
    try:
        with _quiet():
            check_head_path(model)
    except UnsupportedArchitectureError as exc:
        return "refused", str(exc)
    return "verified", model


def _reason_class(reason: str) -> str:
    return reason.split(" (")[0]


if __name__ == "__main__":  # the table of docs/concepts.md: python -m tests.arch_matrix
    from collections import defaultdict

    torch.set_num_threads(1)
    groups: dict[str, list[str]] = defaultdict(list)
    for t in causal_lm_types():
        scope = out_of_scope(t)
        if scope is not None:
            groups[f"out of scope, not tested: {_reason_class(scope)}"].append(t)
            continue
        kind, value = outcome(t)
        key = "verified" if kind == "verified" else f"{kind}: {_reason_class(str(value))}"
        groups[key].append(t)
    print("| outcome | count | architectures |\n|---|---|---|")
    for key in sorted(groups, key=lambda k: (k != "verified", k)):
        print(f"| {key} | {len(groups[key])} | {', '.join(groups[key])} |")
