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
    """The text each token adds; ``"".join(token_texts(t, ids)) == decode(t, ids)``.

    First decodes every token on its own in one batch call: when those texts join to the
    decoded sequence (byte-level BPE without split characters, character tokenizers) they are
    the answer. Otherwise decodes a short sliding window per token (linear time); if a decoder
    is not stable under windowing, falls back to decoding every prefix (quadratic, exact).
    """
    full = decode(tokenizer, ids) if ids else ""
    texts = _single_token_texts(tokenizer, ids)
    return texts if "".join(texts) == full else _joined_texts(tokenizer, ids, full)


def batch_token_texts(
    tokenizer: Any, sequences: list[list[int]]
) -> tuple[list[str], list[list[str]]]:
    """:func:`decode` and :func:`token_texts` of many sequences, in two tokenizer calls
    where single-token texts join (every distinct token decoded once for the whole batch);
    the other sequences take :func:`token_texts`'s exact fallbacks."""
    full = [
        str(t)
        for t in tokenizer.batch_decode(
            sequences, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
    ]
    distinct = sorted({i for ids in sequences for i in ids})
    single = dict(zip(distinct, _single_token_texts(tokenizer, distinct), strict=True))
    texts = []
    for ids, whole in zip(sequences, full, strict=True):
        parts = [single[i] for i in ids]
        texts.append(parts if "".join(parts) == whole else _joined_texts(tokenizer, ids, whole))
    return full, texts


def _joined_texts(tokenizer: Any, ids: list[int], full: str) -> list[str]:
    """Token texts that join to ``full`` where single-token texts do not."""
    texts = _windowed_texts(tokenizer, ids)
    if "".join(texts) != full:
        texts = _prefix_texts(tokenizer, ids)
        _repair_join(texts, full)
    return texts


def _single_token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token decoded on its own (one batch call)."""
    if not ids:
        return []
    rows = tokenizer.batch_decode(
        [[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    return [str(t) for t in rows]


def _windowed_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Incremental detokenization over a window that starts one emitted token back.

    The window keeps the previous token as context, so decoders that treat a sequence's first
    token specially (SentencePiece drops its leading space) still give each later token its
    space; a token that ends inside a multi-byte character waits for the one completing it.
    """
    texts: list[str] = []
    prefix, read = 0, 0  # ids[prefix:read] is decoded context already emitted
    for i in range(len(ids)):
        before = decode(tokenizer, ids[prefix:read])
        after = decode(tokenizer, ids[prefix : i + 1])
        complete = not after.endswith(_INCOMPLETE) and after.startswith(before)
        if complete or i == len(ids) - 1:
            texts.append(after[len(before) :] if after.startswith(before) else after)
            prefix, read = read, i + 1
        else:
            texts.append("")
    return texts


def _prefix_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """The exact but quadratic version: decode every prefix and take what each token adds."""
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
