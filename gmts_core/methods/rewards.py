"""Verifiable reward rules: a registry of functions that score one answer against a reference.

Each rule returns a :class:`RewardVerdict` that says not only the reward but *why*: the rule,
the final answer it extracted, the reference and the verdict. Debugging a reward function
starts there.
"""

from __future__ import annotations

import contextvars
import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import regex

from gmts_core.bounds import MAX_ABS_REWARD, MAX_NUMBER_DIGITS, MAX_NUMBER_EXPONENT
from gmts_core.errors import InvalidInputError, LimitExceededError
from gmts_core.methods.math_worker import MathTimeoutError, verify_math
from gmts_core.registry import Registry

logger = logging.getLogger(__name__)

MAX_REGEX_PATTERN_CHARS = 512
MAX_REFERENCE_CHARS = 4096
REGEX_TIMEOUT_S = 0.25  # per answer; a request's rewards together also obey a RewardBudget
# per answer (math-verify in its own process, see gmts_core.methods.math_worker)
MATH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RewardVerdict:
    """The reward of one answer and the evidence for it."""

    reward: float
    rule: str
    extracted: str | None
    reference: str | None
    # "correct" | "incorrect" | "no answer found" | "unparsable" | "timeout" | "explicit"
    verdict: str

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


class RewardBudget:
    """The total time the reward computations of one request may take.

    Rules with their own per-answer timeout (regex, math) use at most what is left; once the
    budget is spent the next answer raises LimitExceededError naming ``setting`` (how the
    caller configures it), instead of 60 answers x 0.25 s of a backtracking pattern. Time a
    rule spends starting a helper process (``exclude``) is not charged.
    """

    def __init__(self, seconds: float, setting: str = "reward_budget_s") -> None:
        self.seconds = seconds
        self.setting = setting
        self.spent = 0.0

    def remaining(self) -> float:
        return self.seconds - self.spent

    def timeout(self, per_answer: float) -> float:
        """The time limit of the next answer's check: its own limit or what is left."""
        left = self.remaining()
        if left <= 0:
            raise LimitExceededError(
                f"computing the rewards took longer than this server's budget of "
                f"{self.seconds:g} s per request ({self.setting}); use fewer answers or a "
                "simpler reward rule (e.g. a regex without nested repetition)"
            )
        return min(per_answer, left)

    def charge(self, seconds: float) -> None:
        self.spent += max(seconds, 0.0)


_BUDGET: contextvars.ContextVar[RewardBudget | None] = contextvars.ContextVar(
    "gmts_reward_budget", default=None
)
_EXCLUDED: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "gmts_reward_excluded", default=None
)


@contextmanager
def reward_budget(seconds: float, setting: str = "reward_budget_s") -> Iterator[RewardBudget]:
    """Every ``compute_reward`` inside shares one :class:`RewardBudget` of ``seconds``."""
    budget = RewardBudget(seconds, setting)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def rule_timeout(per_answer: float) -> float:
    """The time limit of one answer's check under the current budget (if any)."""
    budget = _BUDGET.get()
    return per_answer if budget is None else budget.timeout(per_answer)


def exclude_from_budget(seconds: float) -> None:
    """Tell the running ``compute_reward`` not to charge ``seconds`` (a one-off start-up)."""
    excluded = _EXCLUDED.get()
    if excluded is not None:
        excluded.append(seconds)


def compute_reward(kind: str, answer: str, reference: Any) -> RewardVerdict:
    """Score ``answer`` with the rule ``kind`` against ``reference`` (within the budget)."""
    fn = get_reward(kind)
    budget = _BUDGET.get()
    if budget is None:
        return _bounded(fn(answer, reference))
    budget.timeout(math.inf)  # raises once the budget is spent
    excluded: list[float] = []
    token = _EXCLUDED.set(excluded)
    start = time.perf_counter()
    try:
        return _bounded(fn(answer, reference))
    finally:
        budget.charge(time.perf_counter() - start - sum(excluded))
        _EXCLUDED.reset(token)


def _bounded(v: RewardVerdict) -> RewardVerdict:
    if not (math.isfinite(v.reward) and abs(v.reward) <= MAX_ABS_REWARD):
        raise InvalidInputError(
            f"reward rule {v.rule!r} gave {v.reward!r}; rewards must be finite and within "
            f"+-{MAX_ABS_REWARD:g}"
        )
    return v


def check_reference(kind: str, reference: Any) -> None:
    """Refuse a reference the rule ``kind`` cannot use (before any sampling): an unknown rule,
    an overlong reference, a numeric reference that is no number within the parsing bounds, an
    invalid or overlong regex."""
    get_reward(kind)
    text = str(reference)
    if len(text) > MAX_REFERENCE_CHARS:
        raise InvalidInputError(
            f"the reference is {len(text)} characters; the limit is {MAX_REFERENCE_CHARS}"
        )
    if kind == "numeric":
        _numeric_reference(text)
    elif kind == "regex":
        _compile_pattern(text)


def explicit_reward(value: float) -> RewardVerdict:
    """A reward given by the caller (e.g. copied from a trainer's log)."""
    if isinstance(value, bool) or not math.isfinite(value) or abs(value) > MAX_ABS_REWARD:
        raise InvalidInputError(
            f"explicit reward must be a finite number within +-{MAX_ABS_REWARD:g}, got {value!r}"
        )
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


# sign, integer digits, fraction digits, exponent (ASCII digits only)
_DECIMAL = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?\d+))?", re.ASCII)


def _parse_decimal(s: str) -> Fraction | None:
    """One decimal number as an exact Fraction, or None: never more than MAX_NUMBER_DIGITS
    digits or an exponent beyond MAX_NUMBER_EXPONENT, so the exact value stays small."""
    m = _DECIMAL.fullmatch(s)
    if m is None:
        return None
    sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    if not whole and not frac:
        return None
    if len(whole) + len(frac) > MAX_NUMBER_DIGITS:
        return None
    if exp is not None and (len(exp.lstrip("+-0")) > 4 or abs(int(exp)) > MAX_NUMBER_EXPONENT):
        return None
    shift = (int(exp) if exp is not None else 0) - len(frac)
    n = int(whole + frac)
    value = Fraction(n * 10**shift) if shift >= 0 else Fraction(n, 10**-shift)
    return -value if sign == "-" else value


def parse_number(text: str) -> Fraction | None:
    """Parse one number ('-1,234.5', '3/4', '+.5', '1e-3') into an exact Fraction, or None.

    Bounded: at most MAX_NUMBER_DIGITS digits and a decimal exponent of at most
    MAX_NUMBER_EXPONENT (gmts_core.bounds); anything larger is None (not a number we read).
    """
    s = text.strip().replace("−", "-").replace(",", "").replace(" ", "")
    if not s or len(s) > 2 * MAX_NUMBER_DIGITS + 16:
        return None
    if "/" in s:
        num, den = s.split("/", 1)
        n, d = _parse_decimal(num), _parse_decimal(den)
        return None if n is None or d is None or d == 0 else n / d
    return _parse_decimal(s)


def _numeric_reference(text: str) -> Fraction:
    ref = parse_number(text)
    if ref is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise InvalidInputError(
            f"numeric reward needs a numeric reference (at most {MAX_NUMBER_DIGITS} digits and "
            f"an exponent of at most {MAX_NUMBER_EXPONENT}), got {shown!r}"
        )
    return ref


def extract_final_number(text: str) -> str | None:
    """The final answer: the content of the last \\boxed{} if any, else the last number."""
    boxed = _last_boxed(text)
    source = _LATEX_FRAC.sub(r"\1/\2", boxed if boxed is not None else text)
    matches = _NUMBER.findall(source)
    if not matches:
        return boxed.strip() if boxed is not None and boxed.strip() else None
    return str(matches[-1]).strip()


# The numeric rules' tolerance: numbers are read exactly (as fractions) and equal when
# |answer - reference| <= NUMERIC_TOLERANCE * max(1, |reference|), relative above 1 and
# absolute below: "85.000085" is 85, "85.0000851" is not (a printed float's last digits pass,
# a different answer does not)
NUMERIC_TOLERANCE = 1e-6


def numbers_equal(value: Fraction, reference: Fraction, tolerance: float) -> bool:
    """Whether ``value`` equals ``reference`` within ``tolerance`` (see NUMERIC_TOLERANCE), in
    exact arithmetic: no float overflow for large values, no rounding for small ones; the
    tolerance as its decimal form says (1e-6 is 1/10^6, not the float just below it)."""
    return abs(value - reference) <= Fraction(repr(tolerance)) * max(Fraction(1), abs(reference))


@register_reward("numeric")
def numeric_reward(
    answer: str, reference: Any, tolerance: float = NUMERIC_TOLERANCE
) -> RewardVerdict:
    """1.0 if the final number equals the reference within ``tolerance`` (NUMERIC_TOLERANCE:
    relative above 1, absolute below)."""
    ref_text = str(reference).strip()
    ref = _numeric_reference(ref_text)
    extracted = extract_final_number(answer)
    if extracted is None:
        return RewardVerdict(0.0, "numeric", None, ref_text, "no answer found")
    value = parse_number(extracted)
    if value is None:  # e.g. a 400-digit number: beyond what is read exactly
        return RewardVerdict(0.0, "numeric", _short(extracted), ref_text, "unparsable")
    ok = numbers_equal(value, ref, tolerance)
    return RewardVerdict(float(ok), "numeric", extracted, ref_text, _verdict(ok))


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    compiled = _compile_pattern(pattern)
    timeout = rule_timeout(REGEX_TIMEOUT_S)
    try:
        match = compiled.search(answer, timeout=timeout)
    except TimeoutError:
        logger.warning("regex reward timed out after %.2fs", timeout)
        return RewardVerdict(0.0, "regex", None, pattern, "timeout")
    ok = match is not None
    return RewardVerdict(
        float(ok), "regex", match.group(0) if match else None, pattern, _verdict(ok)
    )


def _compile_pattern(pattern: str) -> Any:
    if len(pattern) > MAX_REGEX_PATTERN_CHARS:
        raise InvalidInputError(
            f"regex pattern is {len(pattern)} characters; the limit is {MAX_REGEX_PATTERN_CHARS}"
        )
    try:
        return regex.compile(pattern)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise InvalidInputError(f"invalid regex pattern: {exc}") from None


# --- math (optional extra) -------------------------------------------------------------------


@register_reward("math")
def math_reward(answer: str, reference: Any) -> RewardVerdict:
    """Symbolic equivalence with math-verify (``pip install gmts-explorer[math]``).

    math-verify runs in a helper process (gmts_core.methods.math_worker), not in the calling thread:
    its own timeout uses ``signal.alarm``, which works only in a main thread, and sympy can
    hold the interpreter for a long time on inputs like ``10^10^10^10``. The helper is stopped
    after MATH_TIMEOUT_S (or what is left of the request's budget) and the answer gets the
    verdict ``timeout``, from any thread.
    """
    ref_text = str(reference)
    try:
        found, ok, extracted = verify_math(
            answer, ref_text, rule_timeout(MATH_TIMEOUT_S), exclude_from_budget
        )
    except MathTimeoutError:
        logger.warning("math reward timed out")
        return RewardVerdict(0.0, "math", None, ref_text, "timeout")
    if not found:
        return RewardVerdict(0.0, "math", None, ref_text, "no answer found")
    return RewardVerdict(float(ok), "math", extracted, ref_text, _verdict(ok))


def _verdict(ok: bool) -> str:
    return "correct" if ok else "incorrect"
