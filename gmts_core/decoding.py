"""Token texts by incremental decoding.

A token's text is the part of the decoded string that it adds. Joining the token texts of a
sequence reproduces ``tokenizer.decode(ids)`` exactly, for byte-level BPE (GPT-2, Qwen) and
SentencePiece (Llama) tokenizers alike: a token that ends inside a multi-byte character (an
emoji split over several byte tokens) gets an empty text and the character goes to the token
that completes it.
"""

from __future__ import annotations

from typing import Any

_INCOMPLETE = "\ufffd"


def decode(tokenizer: Any, ids: list[int]) -> str:
    """Decode without tidying spaces, keeping special tokens, so texts join exactly."""
    return str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text each token adds; ``"".join(token_texts(t, ids)) == decode(t, ids)``."""
    texts: list[str] = []
    emitted = ""  # the decoded text already assigned to earlier tokens
    for i in range(len(ids)):
        current = decode(tokenizer, ids[: i + 1])
        stable = current.startswith(emitted) and not current.endswith(_INCOMPLETE)
        if stable or i == len(ids) - 1:
            texts.append(current[len(emitted) :] if current.startswith(emitted) else "")
            emitted = current if current.startswith(emitted) else emitted
        else:
            texts.append("")  # inside a multi-byte character: wait for the completing token
    _repair_join(texts, decode(tokenizer, ids) if ids else "")
    return texts


def _repair_join(texts: list[str], full: str) -> None:
    """Guarantee the join invariant even for decoders that are not prefix-stable."""
    if "".join(texts) == full or not texts:
        return
    prefix = "".join(texts[:-1])
    if full.startswith(prefix):
        texts[-1] = full[len(prefix) :]
    else:
        texts[:] = [""] * (len(texts) - 1) + [full]


def token_text(tokenizer: Any, token_id: int) -> str:
    """Display text of a single token (e.g. an alternative), as decoded on its own."""
    return decode(tokenizer, [token_id])
