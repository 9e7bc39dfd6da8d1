"""English cardinal numbers written as words ("eighty-five", "one hundred and twelve", "minus
seven") read as integers, for the ``final_number`` reward rule: a small instruct model sometimes
states its result in words ("the answer is twelve").

Whole cardinals from zero into the billions are read; ordinals ("fifth"), fractions ("a half")
and decimals ("two point five") are not. A word that cannot continue a number ends it and starts
the next: "two three" is 2 then 3; "and" joins only after "hundred" or a scale word ("one
hundred and five" is 105, "two and three" is 2 then 3).
"""

from __future__ import annotations

import regex

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}
_VALUE = {w: i for i, w in enumerate(_UNITS)} | {w: 20 + 10 * i for i, w in enumerate(_TENS)}

# the kinds of word that a unit (1-9), a teen or tens word, or zero may follow ("" = none)
_MAY_FOLLOW = {
    "unit": ("", "tens", "hundred", "scale", "and"),
    "teen": ("", "hundred", "scale", "and"),
    "tens": ("", "hundred", "scale", "and"),
    "zero": ("",),
}

_WORDS = "|".join(sorted([*_VALUE, "hundred", *_SCALES], key=len, reverse=True))
# a run of number words joined by spaces, hyphens or "and"; signed; "a hundred", "a thousand"
_PHRASE = regex.compile(
    rf"\b(?:(?:minus|negative)\s+)?(?:a\s+(?=(?:hundred|thousand|million|billion)\b))?"
    rf"(?:{_WORDS})(?:(?:\s+and\s+|[\s-]+)(?:{_WORDS}))*\b",
    regex.IGNORECASE,
)
_TOKEN = regex.compile(rf"\b(?:minus|negative|a|and|{_WORDS})\b", regex.IGNORECASE)


class _Number:
    """One number read word by word; :meth:`take` is False where a word cannot continue it."""

    def __init__(self, sign: int = 1) -> None:
        self.sign = sign
        self.total = 0  # completed scale groups: "two thousand" -> 2000
        self.group = 0  # the part below the next scale word (< 1000)
        self.last = ""  # the last word's kind: unit, teen, tens, zero, hundred, scale, and
        self.below = 10**12  # a scale word must be below the previous one

    @property
    def started(self) -> bool:
        return self.last != ""

    def value(self) -> int:
        return self.sign * (self.total + self.group)

    def take(self, word: str) -> bool:
        if word == "and":
            return self._set(self.last in ("hundred", "scale"), "and")
        if word == "hundred":
            ok = self.last in ("unit", "teen", "tens") and 0 < self.group < 100
            if ok:
                self.group *= 100
            return self._set(ok, "hundred")
        if word in _SCALES:
            scale = _SCALES[word]
            ok = self.group > 0 and scale < self.below and self.last != "and"
            if ok:
                self.total, self.group, self.below = self.total + self.group * scale, 0, scale
            return self._set(ok, "scale")
        value = _VALUE[word]
        kind = "zero" if value == 0 else "unit" if value < 10 else "teen" if value < 20 else "tens"
        ok = self.last in _MAY_FOLLOW[kind]
        if ok:
            self.group += value
        return self._set(ok, kind)

    def _set(self, ok: bool, kind: str) -> bool:
        if ok:
            self.last = kind
        return ok


def _read_phrase(phrase: str) -> list[int]:
    """The numbers in one run of number words, in order."""
    out: list[int] = []
    number, sign = _Number(), 1
    for raw in _TOKEN.findall(phrase):
        word = raw.lower()
        if word in ("minus", "negative"):
            sign = -1
            continue
        if word == "a":  # "a hundred": the regex allows it only before a scale word
            word = "one"
        if not number.started:
            number.sign, sign = sign, 1
        if number.take(word):
            continue
        if number.started:
            out.append(number.value())
        number = _Number()
        number.take(word)  # "and", "hundred" and scale words cannot start one: skipped
    if number.started:
        out.append(number.value())
    return out


def number_words(text: str) -> list[tuple[int, int, int]]:
    """The numbers written as words in ``text``, in order: (value, start, end) each, where
    start:end is the run of number words it was read from (shared when a run holds two)."""
    return [
        (value, m.start(), m.end())
        for m in _PHRASE.finditer(text)
        for value in _read_phrase(m.group(0))
    ]
