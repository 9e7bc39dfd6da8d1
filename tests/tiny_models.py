"""Tiny random models and locally built tokenizers for tests (no downloads)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

CORPUS = [
    "The answer is 42. Let's think step by step: 17 + 25 = 42.",
    "Héllo wörld! Ça va? Grüße aus Köln. 日本語のテキスト。 Emoji: 😀🎉👍🏽 done.",
    "Q: 47+38=? A: 7+8=15 carry 1, 4+3+1=8, answer 85",
    "def f(x):\n    return x * 2\n\n# newline and    spaces",
] * 20


def byte_level_bpe_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A GPT-2/Qwen-style byte-level BPE tokenizer trained on a tiny corpus."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )


def sentencepiece_bpe_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A Llama-style SentencePiece (Metaspace, byte-fallback) BPE tokenizer.

    As in Llama's vocabulary, ``<unk> <s> </s>`` are ids 0-2 and the 256 byte tokens
    ``<0x00>..<0xFF>`` are ids 3-258: ordinary (not special) tokens, so decoding with
    ``skip_special_tokens=True`` keeps the characters they spell.
    """
    specials = ["<unk>", "<s>", "</s>"]
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = _metaspace_normalizer()
    trained.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="never", split=False
    )
    trained.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials)
    )
    model = json.loads(trained.to_str())["model"]
    pieces = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    ordered = specials + [f"<0x{i:02X}>" for i in range(256)]
    ordered += [p for p, _ in pieces if p not in ordered]
    vocab = {piece: i for i, piece in enumerate(ordered)}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tok.normalizer = trained.normalizer
    tok.pre_tokenizer = trained.pre_tokenizer
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(specials)
    # like Llama: the prompt gets a BOS token (answers are encoded without special tokens)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>"
    )


def _metaspace_normalizer() -> normalizers.Normalizer:
    return normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])


def save_tiny_model(folder: Path, arch: str = "llama", seed: int = 0) -> Path:
    """Save a tiny random causal LM with a matching local tokenizer into ``folder``."""
    torch.manual_seed(seed)
    tok = sentencepiece_bpe_tokenizer() if arch == "llama" else byte_level_bpe_tokenizer()
    common = dict(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    if arch == "llama":
        cfg = LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            **common,
        )
    elif arch == "qwen2":
        cfg = Qwen2Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            **common,
        )
    elif arch == "gpt2":
        cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=256, **common)
    else:
        raise ValueError(arch)
    model = AutoModelForCausalLM.from_config(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
