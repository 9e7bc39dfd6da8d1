"""Tiny GGUF files for tests, written by the ``gguf`` package's own writer (llama.cpp's
gguf-py): a random 2-layer Llama with a byte-level BPE tokenizer, in float or block-quantized
tensors, and files transformers cannot read (an unknown architecture, a tensor type gguf does
not de-quantize)."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

from tests.tiny_models import byte_level_bpe_tokenizer

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 32, 64, 2, 4, 2


def _tensor(writer: gguf.GGUFWriter, name: str, data: np.ndarray, qtype: str) -> None:
    if qtype == "F32" or data.ndim == 1:  # norms stay float32, as llama.cpp writes them
        writer.add_tensor(name, data.astype(np.float32))
        return
    kind = gguf.GGMLQuantizationType[qtype]
    if qtype == "F16":
        writer.add_tensor(name, data.astype(np.float16))
        return
    if kind in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
        writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
        return
    # any other type: raw zero blocks of its size (enough for a header-level refusal)
    block, size = gguf.GGML_QUANT_SIZES[kind]
    raw = np.zeros((data.shape[0], data.shape[1] // block * size), dtype=np.uint8)
    writer.add_tensor(name, raw, raw_dtype=kind)


def write_tiny_gguf(
    path: Path, qtype: str = "Q8_0", architecture: str = "llama", seed: int = 0
) -> Path:
    """A random tiny Llama as GGUF at ``path``: matrices in ``qtype`` (F32, F16, Q8_0, Q4_0,
    or any other GGML type as zero blocks), with a byte-level BPE tokenizer and a chat
    template."""
    rng = np.random.default_rng(seed)
    tok = byte_level_bpe_tokenizer()
    model = json.loads(tok.backend_tokenizer.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    eos = tokens.index("<|endoftext|>")
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-test")
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i == eos else 1 for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    writer.add_pad_token_id(eos)
    writer.add_chat_template(
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    head_dim = HIDDEN // HEADS

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.2).astype(np.float32)

    _tensor(writer, "token_embd.weight", matrix(len(tokens), HIDDEN), qtype)
    for i in range(LAYERS):
        blk = f"blk.{i}"
        _tensor(writer, f"{blk}.attn_norm.weight", np.ones(HIDDEN, np.float32), qtype)
        _tensor(writer, f"{blk}.attn_q.weight", matrix(HIDDEN, HIDDEN), qtype)
        _tensor(writer, f"{blk}.attn_k.weight", matrix(KV_HEADS * head_dim, HIDDEN), qtype)
        _tensor(writer, f"{blk}.attn_v.weight", matrix(KV_HEADS * head_dim, HIDDEN), qtype)
        _tensor(writer, f"{blk}.attn_output.weight", matrix(HIDDEN, HIDDEN), qtype)
        _tensor(writer, f"{blk}.ffn_norm.weight", np.ones(HIDDEN, np.float32), qtype)
        _tensor(writer, f"{blk}.ffn_gate.weight", matrix(FFN, HIDDEN), qtype)
        _tensor(writer, f"{blk}.ffn_up.weight", matrix(FFN, HIDDEN), qtype)
        _tensor(writer, f"{blk}.ffn_down.weight", matrix(HIDDEN, FFN), qtype)
    _tensor(writer, "output_norm.weight", np.ones(HIDDEN, np.float32), qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
