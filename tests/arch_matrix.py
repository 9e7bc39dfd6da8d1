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
import sys
import warnings
from collections import defaultdict
from pathlib import Path
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
# Architectures the generic small sizes cannot build (a size the config derives at init from
# another one, expert groups, state-space head counts, a config property without a setter):
# their config is made with these keys as constructor arguments, beside the generic small
# sizes the default config has (``None`` leaves a generic key out).
_HYBRID = ["linear_attention", "full_attention", "linear_attention", "linear_attention"]
_INKLING2 = {  # the LM head is sized by the unpadded vocabulary
    "unpadded_vocab_size": VOCAB,
    "swa_num_attention_heads": HEADS,
    "swa_num_key_value_heads": HEADS,
    "swa_head_dim": HIDDEN // HEADS,
    "sliding_window_size": 16,
    "rel_extent": 16,
    "log_scaling_n_floor": 16,
    "n_layers_per_attn_res_block": 2,
}
_BLT_PART = {
    "hidden_size": HIDDEN,
    "num_attention_heads": HEADS,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
_TINY: dict[str, dict[str, Any]] = {
    "deepseek_v3": {"n_group": 1, "topk_group": 1},
    "deepseek_v32": {"n_group": 1, "topk_group": 1, "index_n_heads": 4, "index_head_dim": 16},
    "axk1": {"n_group": 1, "topk_group": 1},
    "beam": {"n_group": 1, "topk_group": 1},
    "bamba": {
        "attn_layer_indices": [1],
        "mamba_n_heads": 8,
        "mamba_d_head": 8,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
    },
    "granitemoehybrid": {
        "mamba_n_heads": 8,
        "mamba_d_head": 8,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
        "shared_intermediate_size": 64,
        "layer_types": ["mamba", "attention", "mamba", "mamba"],
    },
    "mamba2": {"num_heads": 8, "head_dim": 8, "state_size": 16, "chunk_size": 16, "n_groups": 1},
    # its Mamba-2 mixer's own sizes (1024 channels in 128 heads, state 256, chunks of 256) are no
    # generic keys: left at their defaults, the tiny model's torch path scanned 256-token chunks
    # and was the costliest architecture of the suite (about 60 s of its tests); the same mixer
    # at small sizes (with _EXTRA's lm_head_multiplier)
    "falcon_h1": {
        "mamba_d_ssm": 64,
        "mamba_n_heads": 8,
        "mamba_d_head": 8,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
    },
    "falcon": {"head_dim": None},
    "xlstm": {"v_head_dim": None, "qk_head_dim": None},
    "xlnet": {"max_position_embeddings": None},
    "dots1": {"n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2},
    "dbrx": {
        "attn_config": {"kv_n_heads": 4, "rope_theta": 10000.0, "clip_qkv": 8.0},
        "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
    },
    "reformer": {"axial_pos_shape": [8, 16], "axial_pos_embds_dim": [16, 16]},
    "longcat_flash": {"zero_expert_num": 2, "expert_ffn_hidden_size": 32},
    "gemma4_text": {"vocab_size_per_layer_input": 96, "hidden_size_per_layer_input": 8},
    "gemma4_unified_text": {},
    "bailing_hybrid": {"n_group": 1, "topk_group": 1, "linear_head_dim": 8, "layer_types": _HYBRID},
    "kimi_linear": {"linear_head_dim": 8, "layer_types": _HYBRID},
    "olmo_hybrid": {"linear_key_head_dim": 8, "linear_value_head_dim": 8},
    "rwkv": {"attention_hidden_size": 32},
    "recurrent_gemma": {"lru_width": 32, "attention_window_size": 16},
    "cpmant": {"dim_head": 8, "dim_ff": 64},
    "zamba": {"attention_hidden_size": 64, "attention_head_dim": 16, "mamba_dt_rank": 8},
    "ergo": {"first_dense_intermediate_size": 64, "shared_intermediate_size": 32},
    "inkling_text": {"swa_head_dim": 8, "sliding_window_size": 16},
    "cohere_compass_text": {  # per-layer-type RoPE; mrope sections sum to head_dim / 2
        "rope_parameters": {
            "full_attention": {
                "rope_type": "default",
                "rope_theta": 1e4,
                "mrope_section": [2, 1, 1],
            },
        }
    },
    "dots3_note_text": {  # indexed (DSA) and sliding MLA layers, the latter sized by swa_* keys
        "head_dim": 16,
        "index_n_heads": 4,
        "index_head_dim": 16,
        "shared_experts_intermediate_size": 32,
        "swa_num_attention_heads": 4,
        "swa_num_key_value_heads": 4,
        "swa_q_lora_rank": 16,
        "swa_kv_lora_rank": 16,
        "swa_head_dim": 16,
        "swa_qk_nope_head_dim": 8,
        "swa_v_head_dim": 8,
    },
    "gemma3n_text": {  # both layer types among the cache producers, the last 2 layers sharing
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "num_kv_shared_layers": 2,
        "vocab_size_per_layer_input": 96,
        "hidden_size_per_layer_input": 8,
        "laurel_rank": 8,
    },
    "lfm2_moe": {"layer_types": ["conv", "full_attention"] * 2, "num_dense_layers": 1},
    "mimo_v2_flash": {  # sliding layers double the kv heads; rotary 0.334 of a 24-wide head
        "n_group": 1,
        "topk_group": 1,
        "head_dim": 24,
        "num_key_value_heads": 2,
    },
    "qwen4_exp_text": {
        "indexer_n_heads": 4,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 8,
        "indexer_budget": 16,
        "indexer_compress_ratio": 4,
        "hc_lowrank": 8,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
    },
    "xmod": {"default_language": "en_XX"},  # its forward needs a language adapter chosen
    "zamba2": {
        "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"],
        "head_dim": None,
        "mamba_d_state": 16,
        "chunk_size": 16,
        "adapter_rank": 8,
    },
    "inkling2_text": _INKLING2,
    "inkling2_loop_text": {
        **_INKLING2,
        "loop_layer_index_start": 2,
        "loop_layer_index_end": 4,
        "loop_num_passes": 2,
        "loop_gate_rank": 8,
    },
    "blt": {  # the byte patcher, local encoder and decoder and the global model, each tiny
        "encoder_hash_byte_group_vocab": 64,
        "local_attention_window_len": 64,
        "patcher_config": {**_BLT_PART, "vocab_size": VOCAB, "num_hidden_layers": 1},
        "encoder_config": {**_BLT_PART, "vocab_size": VOCAB, "hidden_size_global": HIDDEN},
        "decoder_config": {
            **_BLT_PART,
            "vocab_size": VOCAB,
            "hidden_size_global": HIDDEN,
            "num_hidden_layers": 2,
        },
        "global_config": {**_BLT_PART, "num_hidden_layers": 2},
    },
    "roc_bert": {
        "shape_embed_dim": 8,
        "pronunciation_embed_dim": 8,
        "shape_vocab_size": 64,
        "pronunciation_vocab_size": 64,
    },
}
# Draft models of assisted decoding: their forward takes the target model's embeddings and KV
# states, never token ids (test_drafters_need_the_target_models_states checks it).
DRAFTERS = {
    "gemma4_assistant": "an assisted-decoding drafter (its forward takes the target model's "
    "inputs_embeds and shared_kv_states, not token ids)"
}
# BERT-style encoders in the causal-LM mapping decode only with is_decoder=True.
_DECODER_FLAG = {"is_decoder": True}


class Skip(Exception):
    """This architecture cannot be built as a tiny decoder-only model here; ``str`` says why."""


def causal_lm_types() -> list[str]:
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


@functools.cache  # a default config of each of 200 types; asked again by tiny_config and render
def out_of_scope(model_type: str) -> str | None:
    """Why ``model_type`` is outside what the tool analyses (an encoder-decoder, or a multimodal
    model whose text model is another entry of the mapping), from its default config; None when
    it is a decoder-only language model. Out-of-scope architectures are listed, not tested."""
    if model_type in DRAFTERS:
        return DRAFTERS[model_type]
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
        raise Skip(f"its default config cannot be made ({_why(exc)})") from None
    scope = out_of_scope(model_type)
    if scope is not None:
        raise Skip(scope)
    if model_type in _TINY:
        return _tiny_by_constructor(model_type, config)
    try:
        for key, value in _SMALL.items():
            if hasattr(config, key) and not isinstance(getattr(config, key), dict | list):
                setattr(config, key, value)
        for key, value in {**_DECODER_FLAG, **_EXTRA.get(model_type, {})}.items():
            if hasattr(config, key) or model_type in _EXTRA:
                setattr(config, key, value)
    except Exception as exc:  # noqa: BLE001 - e.g. heterogeneous per-layer configs
        raise Skip(f"config cannot be made tiny generically ({_why(exc)})") from None
    return config


def _tiny_by_constructor(model_type: str, default: Any) -> Any:
    sizes = {k: v for k, v in {**_SMALL, **_DECODER_FLAG}.items() if _has(default, k)}
    extra = {**_EXTRA.get(model_type, {}), **_TINY[model_type]}
    kwargs = {k: v for k, v in {**sizes, **extra}.items() if v is not None}
    try:
        with _quiet():
            return AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a stated skip
        raise Skip(f"its tiny config cannot be made ({_why(exc)})") from None


def _has(config: Any, key: str) -> bool:
    try:
        return hasattr(config, key)
    except Exception:  # noqa: BLE001 - a per-layer attribute: set through the constructor
        return key in config.to_dict()


def _why(exc: BaseException) -> str:
    """The exception as the docs' table states it: its type and first line."""
    line = (str(exc).splitlines() or [""])[0][:120]
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


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
            raise Skip(f"cannot be built from a tiny config ({_why(exc)})") from None
    model.eval()
    if not getattr(model, "base_model_prefix", None) or model.get_output_embeddings() is None:
        raise Skip("no separate transformer body and LM head")
    model.requires_grad_(False)
    try:
        with torch.no_grad(), _quiet():
            model(input_ids=torch.arange(3, 3 + PROBE_TOKENS)[None], use_cache=False)
    except Exception as exc:  # noqa: BLE001 - the model itself fails: not ours to verify
        raise Skip(f"its own forward fails on the tiny config ({_why(exc)})") from None
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


DOCS = Path(__file__).resolve().parents[1] / "docs" / "concepts.md"
BEGIN = "<!-- arch-matrix: generated by `python -m tests.arch_matrix --write-docs` -->"
END = "<!-- arch-matrix: end -->"


def generate_fails(model: torch.nn.Module) -> bool:
    """True when the model's own ``generate`` fails on two tokens (its sampling round trip is
    then checked on the statistics only)."""
    try:
        with torch.no_grad(), _quiet():
            model.generate(  # type: ignore[operator]
                torch.arange(3, 6)[None],
                attention_mask=torch.ones(1, 3, dtype=torch.long),
                do_sample=False,
                max_new_tokens=2,
                pad_token_id=0,
            )
    except Exception:  # noqa: BLE001 - the model's own generate
        return True
    return False


def _reason_class(reason: str) -> str:
    return reason.split(" (")[0]


def _refusal_class(message: str) -> str:
    """A refusal without the class name and figures: 'transforms its logits ...'."""
    return _reason_class(message.split(" ", 1)[1].lstrip(": ")).split(";")[0]


def render(outcomes: dict[str, tuple[str, Any]], served: int, no_generate: list[str]) -> str:
    """The generated block of docs/concepts.md from every architecture's outcome, the number of
    verified ones the KV-cached sampler serves and the verified ones whose generate fails."""
    import transformers

    groups: dict[str, list[str]] = defaultdict(list)
    untested: list[tuple[str, str]] = []
    for t in causal_lm_types():
        kind, value = outcomes[t]
        scope = out_of_scope(t)
        if scope is not None:
            groups[f"out of scope, not tested: {_reason_class(scope)}"].append(t)
        elif kind == "verified":
            groups["verified"].append(t)
        elif kind == "refused":
            groups[f"refused by the probe: {_refusal_class(str(value))}"].append(t)
        else:
            untested.append((t, str(value)))
    in_scope = len(causal_lm_types()) - sum(len(v) for k, v in groups.items() if "scope" in k)
    verified = len(groups["verified"])
    lines = [
        BEGIN,
        f"With transformers {transformers.__version__}: {len(causal_lm_types())} architectures "
        f"in the causal-LM mapping, {in_scope} of them decoder-only; {verified} verified, "
        f"{sum(len(v) for k, v in groups.items() if k.startswith('refused'))} refused by the "
        f"probe, {len(untested)} untested. The KV-cached sampler serves {served} of the "
        f"{verified} verified ones (the others are sampled with `generate`).",
        "",
        "| outcome | count | architectures |",
        "|---|---|---|",
    ]
    for key in sorted(groups, key=lambda k: (k != "verified", k)):
        lines.append(f"| {key} | {len(groups[key])} | {', '.join(groups[key])} |")
    for t, reason in untested:
        lines.append(f"| untested: {reason.replace('|', '/')} | 1 | {t} |")
    lines += [
        "",
        "Verified architectures whose own `generate` fails on the tiny config "
        f"({len(no_generate)}): {', '.join(no_generate) or 'none'}; their sampling round "
        "trip is not run, and loading such a model logs a warning (given answers still work; "
        "sampling does not).",
        END,
    ]
    return "\n".join(lines)


def docs_block(text: str) -> str:
    """The generated block as docs/concepts.md has it."""
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def _matrix() -> str:
    from gmts_core.sampling.sampler_probe import unserved_reason

    outcomes = {t: outcome(t) for t in causal_lm_types()}
    verified = [(t, v) for t, (k, v) in outcomes.items() if k == "verified"]
    with _quiet():
        served = sum(unserved_reason(m) is None for _, m in verified)
        no_generate = [t for t, m in verified if generate_fails(m)]
    return render(outcomes, served, no_generate)


if __name__ == "__main__":  # python -m tests.arch_matrix [--write-docs]: the table of the docs
    torch.set_num_threads(1)
    block = _matrix()
    if "--write-docs" in sys.argv:
        text = DOCS.read_text()
        DOCS.write_text(text.replace(docs_block(text), block))
    print(block)
