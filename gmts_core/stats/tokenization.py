"""Token ids of prompts and given answers, the way every analysis and training step encodes them.

A prompt goes through the tokenizer's chat template when asked (an error if it has none);
a given answer is encoded as text, so special-token strings in it are split like any other
text and its token texts join back to the answer.
"""

from __future__ import annotations

from typing import Any

from gmts_core.errors import InvalidInputError


def encode_prompt(tokenizer: Any, prompt: str, chat_template: bool) -> list[int]:
    """Prompt token ids, through the tokenizer's chat template if asked."""
    if chat_template:
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidInputError("this tokenizer has no chat template")
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return list(ids)
    ids = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if not ids and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id]
    if not ids:
        raise InvalidInputError("prompt is empty after tokenization")
    return ids


def encode_answer(tok: Any, answer: str, special_tokens: bool = False) -> list[int]:
    """A given answer's token ids. As text by default: special-token strings ("<eos>") are
    split like any other text, so the token texts join back to ``answer``; with
    ``special_tokens`` they become control tokens."""
    if special_tokens:
        return list(tok(answer, add_special_tokens=False)["input_ids"])
    try:
        encoded = tok(answer, add_special_tokens=False, split_special_tokens=True)
    except TypeError:  # a tokenizer without the option: no special-token parsing to avoid
        encoded = tok(answer, add_special_tokens=False)
    return list(encoded["input_ids"])
