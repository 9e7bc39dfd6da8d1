"""Verifiable reward rules: a registry of functions that score one answer against a reference.

Each rule returns a :class:`RewardVerdict` that says not only the reward but *why*: the rule,
the final answer it extracted, the reference and the verdict. Debugging a reward function
starts there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import regex

from gmts_core.errors import InvalidInputError
from gmts_core.registry import Registry

logger = logging.getLogger(__name__)

MAX_REGEX_PATTERN_CHARS = 512
REGEX_TIMEOUT_S = 0.25


@dataclass(frozen=True)
class RewardVerdict:
    """The reward of one answer and the evidence for it."""

    reward: float
    rule: str
    extracted: str | None
    reference: str | None
    verdict: str  # "correct" | "incorrect" | "no answer found" | "timeout" | "explicit"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RewardFn = Callable[[str, Any], RewardVerdict]
REWARDS: Registry[RewardFn] = Registry("reward rule")


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Register a reward rule under ``name`` (decorator)."""
    return REWARDS.register(name)


def list_rewards() -> list[str]:
    return REWARDS.names()


def get_reward(name: str) -> RewardFn:
    return REWARDS.get(name)


def compute_reward(kind: str, answer: str, reference: Any) -> RewardVerdict:
    """Score ``answer`` with the rule ``kind`` against ``reference``."""
    return get_reward(kind)(answer, reference)


def explicit_reward(value: float) -> RewardVerdict:
    """A reward given by the caller (e.g. copied from a trainer's log)."""
    if not math.isfinite(value):
        raise InvalidInputError(f"explicit reward must be finite, got {value!r}")
    return RewardVerdict(float(value), "explicit", None, None, "explicit")


# --- numeric ---------------------------------------------------------------------------------

# A signed number with optional thousands separators, decimals or a simple fraction.
_NUMBER = regex.compile(
    r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*[-+]?\d+(?:\.\d+)?)?"
    r"|(?<![\w.])[-+−]?\.\d+"
)
_BOXED = "\\boxed{"
# LaTeX fractions with simple numeric parts: \frac{3}{4}, \dfrac{-1}{2}, \tfrac{3}{4}
_LATEX_FRAC = regex.compile(r"\\[dt]?frac\s*\{\s*([-+−]?[\d.,]+)\s*\}\s*\{\s*([-+−]?[\d.,]+)\s*\}")


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``, honouring nested braces."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def parse_number(text: str) -> Fraction | None:
    """Parse one number ('-1,234.5', '3/4', '+.5') into an exact Fraction, or None."""
    s = text.strip().replace("−", "-").replace(",", "").replace(" ", "")
    if not s:
        return None
    try:
        if "/" in s:
            num, den = s.split("/", 1)
            d = Fraction(den)
            return None if d == 0 else Fraction(num) / d
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def extract_final_number(text: str) -> str | None:
    """The final answer: the content of the last \\boxed{} if any, else the last number."""
    boxed = _last_boxed(text)
    source = _LATEX_FRAC.sub(r"\1/\2", boxed if boxed is not None else text)
    matches = _NUMBER.findall(source)
    if not matches:
        return boxed.strip() if boxed is not None and boxed.strip() else None
    return str(matches[-1]).strip()


@register_reward("numeric")
def numeric_reward(answer: str, reference: Any, tolerance: float = 1e-6) -> RewardVerdict:
    """1.0 if the final number equals the reference within a relative/absolute tolerance."""
    ref_text = str(reference).strip()
    ref = parse_number(ref_text)
    if ref is None:
        raise InvalidInputError(f"numeric reward needs a numeric reference, got {ref_text!r}")
    extracted = extract_final_number(answer)
    value = parse_number(extracted) if extracted is not None else None
    if value is None:
        return RewardVerdict(0.0, "numeric", extracted, ref_text, "no answer found")
    ok = abs(float(value) - float(ref)) <= tolerance * max(1.0, abs(float(ref)))
    return RewardVerdict(float(ok), "numeric", extracted, ref_text, _verdict(ok))


# --- exact -----------------------------------------------------------------------------------


@register_reward("exact")
def exact_reward(answer: str, reference: Any) -> RewardVerdict:
    """1.0 if the answer equals the reference after stripping surrounding whitespace."""
    ref_text = str(reference)
    got = answer.strip()
    ok = got == ref_text.strip()
    return RewardVerdict(float(ok), "exact", got, ref_text, _verdict(ok))


# --- regex -----------------------------------------------------------------------------------


@register_reward("regex")
def regex_reward(answer: str, reference: Any) -> RewardVerdict:
    """1.0 if the pattern ``reference`` is found in the answer.

    Patterns are length-limited and matched with a timeout, so a catastrophically
    backtracking pattern such as ``(a+)+$`` cannot hang the process.
    """
    pattern = str(reference)
    if len(pattern) > MAX_REGEX_PATTERN_CHARS:
        raise InvalidInputError(
            f"regex pattern is {len(pattern)} characters; the limit is {MAX_REGEX_PATTERN_CHARS}"
        )
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        raise InvalidInputError(f"invalid regex pattern: {exc}") from None
    try:
        match = compiled.search(answer, timeout=REGEX_TIMEOUT_S)
    except TimeoutError:
        logger.warning("regex reward timed out after %.2fs", REGEX_TIMEOUT_S)
        return RewardVerdict(0.0, "regex", None, pattern, "timeout")
    ok = match is not None
    return RewardVerdict(
        float(ok), "regex", match.group(0) if match else None, pattern, _verdict(ok)
    )


# --- math (optional extra) -------------------------------------------------------------------


@register_reward("math")
def math_reward(answer: str, reference: Any) -> RewardVerdict:
    """Symbolic equivalence with math-verify (``pip install gmts-explorer[math]``)."""
    try:
        from math_verify import parse, verify
    except ImportError:
        raise InvalidInputError(
            "the 'math' reward needs math-verify: pip install 'gmts-explorer[math]'"
        ) from None
    ref_text = str(reference)
    gold = parse(ref_text if "$" in ref_text or "\\" in ref_text else f"${ref_text}$")
    pred = parse(answer)
    extracted = str(pred[-1]) if pred else None
    if not pred:
        return RewardVerdict(0.0, "math", None, ref_text, "no answer found")
    ok = bool(verify(gold, pred))
    return RewardVerdict(float(ok), "math", extracted, ref_text, _verdict(ok))


def _verdict(ok: bool) -> str:
    return "correct" if ok else "incorrect"
