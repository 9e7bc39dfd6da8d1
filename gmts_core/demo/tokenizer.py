"""The demo model's tokenizer: one token per character, plus a few whole words.

Every printable ASCII character and the newline is a token (so any digit, operator or space is
one token and decoding is exact), the words the task's solutions use (``carry``, ``borrow``,
``answer``) are single tokens, and ``<pad>``, ``<eos>`` and ``<unk>`` are special. The pieces
are concatenated on decode (no spaces inserted), so ``decode(encode(text)) == text`` for any
ASCII text. Saved in the Hugging Face format, it loads offline with
``AutoTokenizer.from_pretrained(folder)`` as a ``PreTrainedTokenizerFast``.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, EOS, UNK)
WORDS: tuple[str, ...] = ("carry", "borrow", "answer")
CHARACTERS: tuple[str, ...] = tuple(string.printable[:95]) + ("\n",)  # printable ASCII + newline


def build_vocab() -> dict[str, int]:
    """Token -> id: special tokens first, then the words, then single characters."""
    tokens = [*SPECIAL_TOKENS, *WORDS, *CHARACTERS]
    return {tok: i for i, tok in enumerate(tokens)}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The demo tokenizer, built from scratch (no files needed)."""
    backend = Tokenizer(models.WordLevel(vocab=build_vocab(), unk_token=UNK))
    # Words first (leftmost alternative wins), then any single character, newline included.
    pattern = Regex("|".join(WORDS) + r"|[\s\S]")
    backend.pre_tokenizer = pre_tokenizers.Split(pattern, behavior="isolated")
    backend.decoder = decoders.Fuse()  # concatenate pieces: no spaces inserted
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",  # decoder-only models generate after the last prompt token
        clean_up_tokenization_spaces=False,
        model_max_length=256,
    )


def save_tokenizer(folder: str | Path) -> PreTrainedTokenizerFast:
    """Build the tokenizer and write tokenizer.json, tokenizer_config.json, special tokens.

    The config names the class ``PreTrainedTokenizerFast`` and a ``special_tokens_map.json``
    is written too, so older transformers releases load the folder as well.
    """
    folder = Path(folder)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    special = {"pad_token": PAD, "eos_token": EOS, "unk_token": UNK}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    return tokenizer
