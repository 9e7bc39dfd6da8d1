"""Token texts: joining them reproduces the decoded answer, for byte-level BPE and SentencePiece.

The tokenizers are the locally built ones of tests/tiny_models.py, loaded back from a saved
model folder through AutoTokenizer (the same path a real model takes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_core.model.loading import LoadedModel
from gmts_core.stats.decoding import (
    _prefix_texts,
    batch_token_texts,
    decode,
    token_text,
    token_texts,
)

TEXTS = [
    "Grüße 😀👍🏽 日本語",
    "Héllo wörld! Ça va? 47+38=85",
    "🧪🦜 family: 👩‍👩‍👧 flag: 🇯🇵",
    "  two leading spaces and trailing  ",
    "line one\n\n\tindented line",
    "ü",
    "😀",
]


@pytest.fixture(scope="module", params=["gpt2", "llama", "qwen2"])
def tokenizer(request: pytest.FixtureRequest, tiny_lm: Callable[[str], LoadedModel]) -> Any:
    return tiny_lm(request.param).tokenizer


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("text", TEXTS)
def test_joined_token_texts_equal_decode(tokenizer: Any, text: str) -> None:
    ids = _ids(tokenizer, text)
    texts = token_texts(tokenizer, ids)
    assert len(texts) == len(ids)
    assert "".join(texts) == decode(tokenizer, ids)
    assert decode(tokenizer, ids).strip() == text.strip()  # the tokenizers round-trip the text


def test_emoji_split_over_byte_tokens_goes_to_the_completing_token(tokenizer: Any) -> None:
    ids = _ids(tokenizer, "😀")
    texts = token_texts(tokenizer, ids)
    assert "".join(texts).strip() == "😀"
    assert all(t == "" or "😀" in t for t in texts)  # no token carries half a character
    assert "\ufffd" not in "".join(texts)


def test_windowed_texts_equal_the_prefix_decoding(tokenizer: Any) -> None:
    """The linear-time windowed texts are token by token what decoding every prefix gives."""
    ids = _ids(tokenizer, " ".join(TEXTS))
    assert token_texts(tokenizer, ids) == _prefix_texts(tokenizer, ids)


@pytest.mark.parametrize(
    "text", [" 7+8=15 carry 1, 4+3+1=8, answer 85", "Hello world, plain ASCII."]
)
def test_the_single_token_path_splits_as_prefix_decoding(tokenizer: Any, text: str) -> None:
    """Where tokens decoded one by one join to the whole (the fast path), the split is the one
    that decoding every prefix gives."""
    ids = _ids(tokenizer, text)
    assert token_texts(tokenizer, ids) == _prefix_texts(tokenizer, ids)


@given(st.text(min_size=0, max_size=40))
@settings(max_examples=40, deadline=None)
def test_round_trip_on_arbitrary_text(tokenizer: Any, text: str) -> None:
    ids = _ids(tokenizer, text)
    assert "".join(token_texts(tokenizer, ids)) == decode(tokenizer, ids)


def test_special_tokens_are_kept(tokenizer: Any) -> None:
    ids = _ids(tokenizer, "85") + [tokenizer.eos_token_id]
    texts = token_texts(tokenizer, ids)
    assert texts[-1] == tokenizer.eos_token
    assert "".join(texts) == decode(tokenizer, ids)


def test_incomplete_character_at_the_end_still_joins(tokenizer: Any) -> None:
    ids = _ids(tokenizer, "a😀")
    cut = ids[:-1]  # may end inside the emoji for byte-level tokenizers
    assert "".join(token_texts(tokenizer, cut)) == decode(tokenizer, cut)


def test_empty_and_single_token(tokenizer: Any) -> None:
    assert token_texts(tokenizer, []) == []
    ids = _ids(tokenizer, "a")
    assert "".join(token_texts(tokenizer, ids)) == decode(tokenizer, ids)
    assert isinstance(token_text(tokenizer, ids[-1]), str)


def test_batch_token_texts_equal_one_sequence_at_a_time(tokenizer: Any) -> None:
    """The batch form gives exactly the per-sequence texts and decodes, the fast path and the
    fallbacks (split emoji, special tokens, an empty sequence) mixed in one batch."""
    sequences = [_ids(tokenizer, t) for t in TEXTS] + [
        _ids(tokenizer, "85") + [tokenizer.eos_token_id],
        _ids(tokenizer, "a😀")[:-1],
        [],
    ]
    decoded, texts = batch_token_texts(tokenizer, sequences)
    assert decoded == [decode(tokenizer, ids) for ids in sequences]
    assert texts == [token_texts(tokenizer, ids) for ids in sequences]
