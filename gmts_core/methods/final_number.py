"""The ``final_number`` reward rule: the number a natural-language answer states as its result.

A small instruct model answers "What is 47 + 38?" in prose: "47 + 38 = 85. So Tom has 85
apples.", "The answer is 85. Check: 85 - 38 = 47", "**85**", "\\boxed{85}". The ``numeric`` rule
takes the last number, which a check written after the answer replaces; this rule takes the
number the answer *states* (:func:`extract_stated_number`) and compares it as ``numeric``
does (read exactly, equal within ``NUMERIC_TOLERANCE``). Registered with the other rules
when :mod:`gmts_core.methods` is imported.
"""

from __future__ import annotations

from typing import Any

import regex

from gmts_core.methods.number_words import number_words
from gmts_core.methods.rewards import (
    _LATEX_FRAC,
    _NUMBER,
    NUMERIC_TOLERANCE,
    RewardVerdict,
    _last_boxed,
    _numeric_reference,
    _short,
    _verdict,
    extract_final_number,
    numbers_equal,
    parse_number,
    register_reward,
)

# "the answer is 85", "Answer: 85", "the final answer is $85$", "the answer is 47 + 38 = 85":
# what follows the marker, to the end of its sentence (at most _STATED_WINDOW characters)
_ANSWER_MARKER = regex.compile(r"\banswer\b\s*(?:is|was|would be|:|=)", regex.IGNORECASE)
_STATED_WINDOW = 60
_SENTENCE_END = regex.compile(r"\n|[.!?](?:\s|$)")
_BOLD = regex.compile(r"\*\*([^*\n]{1,40})\*\*")


def _first_word_number(text: str) -> str | None:
    """The first number written in words in ``text`` ("eighty-five" -> "85"), or None."""
    found = number_words(text)
    return str(found[0][0]) if found else None


def extract_stated_number(text: str) -> tuple[str | None, str]:
    """The number a natural-language answer gives as its result, and the form it was found in.

    In order: the last ``\\boxed{N}``; the number right after the last "answer is", "answer:"
    or "answer =", in its sentence (after its last "=": "the answer is 47 + 38 = 85"), so a
    check written after the stated answer does not replace it; the last
    number in bold, ``**N**``; else the last number in the text (which reads "= N" at the end of
    a worked line). Returns ``(None, "none")`` when there is no number at all.

    Numbers written as words (:mod:`gmts_core.methods.number_words`: "the answer is
    eighty-five", "**twelve**") are read where no digits are: in a box, an "answer is" sentence
    or a bold span that holds no digit number, and as the last number of a text with no digit
    number at all; the form then ends in " (words)". Where digits are, they decide, as before.
    """
    boxed = _last_boxed(text)
    if boxed is not None:
        found = extract_final_number(boxed)  # a box without a digit number: its text
        worded = _first_word_number(boxed) if found is None or parse_number(found) is None else None
        if worded is not None:
            return worded, "boxed (words)"
        if found is not None:
            return found, "boxed"
    for marker in reversed(list(_ANSWER_MARKER.finditer(text))):
        window = text[marker.end() : marker.end() + _STATED_WINDOW]
        end = _SENTENCE_END.search(window)
        window = window[: end.start()] if end is not None else window
        window = _LATEX_FRAC.sub(r"\1/\2", window.rpartition("=")[2])  # a sum's result
        numbers = _NUMBER.findall(window.replace("$", " ").replace("*", " "))
        if numbers:
            return str(numbers[0]).strip(), "answer is"
        worded = _first_word_number(window)
        if worded is not None:
            return worded, "answer is (words)"
    for bold in reversed(list(_BOLD.finditer(text))):
        numbers = _NUMBER.findall(bold.group(1).replace("$", " "))
        if numbers:
            return str(numbers[-1]).strip(), "bold"
        worded = _first_word_number(bold.group(1))
        if worded is not None:
            return worded, "bold (words)"
    last = _NUMBER.findall(_LATEX_FRAC.sub(r"\1/\2", text))
    if last:
        return str(last[-1]).strip(), "last number"
    words = number_words(text)
    return (str(words[-1][0]), "last number (words)") if words else (None, "none")


@register_reward("final_number")
def final_number_reward(
    answer: str, reference: Any, tolerance: float = NUMERIC_TOLERANCE
) -> RewardVerdict:
    """1.0 if the number a natural-language answer states (:func:`extract_stated_number`:
    boxed, "the answer is N", bold, else the last number) equals the reference."""
    ref_text = str(reference).strip()
    ref = _numeric_reference(ref_text)
    extracted, _ = extract_stated_number(answer)
    if extracted is None:
        return RewardVerdict(0.0, "final_number", None, ref_text, "no answer found")
    value = parse_number(extracted)
    if value is None:
        return RewardVerdict(0.0, "final_number", _short(extracted), ref_text, "unparsable")
    ok = numbers_equal(value, ref, tolerance)
    return RewardVerdict(float(ok), "final_number", extracted, ref_text, _verdict(ok))
