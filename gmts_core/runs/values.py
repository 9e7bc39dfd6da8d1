"""Values read from run files, validated at the boundary, before any reader uses them.

A run file is written by someone else, so every value is checked where it enters: a JSON
line as a whole by :func:`check_json` (nesting depth, strings that are valid Unicode, no lone
surrogate, integers inside 64 bits), then each field a reader needs by its own rule:
:func:`as_float` (a reward or advantage: finite, at most :data:`MAX_ABS_NUMBER` in magnitude,
NaN/None meaning "abstained"), :func:`as_int` (a step number, a token id: an integer in a
range). A bad value raises :class:`~gmts_core.runs.errors.RunFormatError` naming the file,
the line and the field (``rewards[1]``), which the server answers with a 422.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

from gmts_core.runs.errors import RunFormatError

MAX_ABS_NUMBER = 1e15  # rewards, advantages: sums and squares of such values stay finite
MAX_INT = 2**63 - 1  # integers of a JSON line: inside 64 bits
MAX_STEP = 2**53 - 1  # step numbers: exact as a JSON (double) number
MAX_JSON_DEPTH = 64  # nesting of one JSON line (chat content parts are 5 deep)


def bad_string(value: str) -> bool:
    """Whether ``value`` cannot be written as UTF-8 (a lone surrogate)."""
    try:
        value.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def check_json(obj: Any, path: Path | str, line: int | None) -> Any:
    """``obj`` itself, refused if it nests deeper than :data:`MAX_JSON_DEPTH`, holds a string
    (key or value) that is not valid Unicode, or an integer outside 64 bits. Iterative (a
    deep value cannot exhaust the stack), and only containers are queued: a list of millions
    of numbers costs one pass, no memory. A field's name is worked out only to report it."""
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(obj, (), 0)]
    while stack:
        container, where, depth = stack.pop()
        if depth >= MAX_JSON_DEPTH:
            raise _bad(path, line, where, f"nests deeper than {MAX_JSON_DEPTH} levels")
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, value in items:
            if isinstance(key, str) and bad_string(key):
                raise _bad(path, line, where, "has a key that is not valid Unicode")
            if isinstance(value, (dict, list)):
                if value:
                    stack.append((value, (*where, key), depth + 1))
            elif isinstance(value, str):
                if bad_string(value):
                    raise _bad(
                        path, line, (*where, key), "holds a lone surrogate (not valid Unicode)"
                    )
            elif (
                isinstance(value, int)
                and not isinstance(value, bool)
                and not (-MAX_INT <= value <= MAX_INT)
            ):
                raise _bad(
                    path, line, (*where, key), "is an integer out of range (outside 64 bits)"
                )
    return obj


def _field(where: tuple[Any, ...]) -> str:
    out = ""
    for key in where:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


def _bad(path: Path | str, line: int | None, where: tuple[Any, ...], what: str) -> RunFormatError:
    name = _field(where) or "(the line)"
    name = name.encode("utf-8", "backslashreplace").decode("utf-8")  # a bad key, shown
    return RunFormatError(path, line, f"field {name!r} {what}")


def as_float(value: Any, what: str, path: Path | str, line: int | None) -> float:
    """A reward or advantage as a float: None -> NaN (a reward function that abstained);
    refused unless finite (or NaN) and at most :data:`MAX_ABS_NUMBER` in magnitude."""
    if value is None:
        return float("nan")
    # a number's own type only: true/false and "1"/"0" are a writer's bug, not a reward
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RunFormatError(path, line, f"{what} must be a number, got {_short(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer literal such as 10**400
        raise RunFormatError(path, line, f"{what} {_short(value)} is out of range") from None
    if math.isinf(number) or abs(number) > MAX_ABS_NUMBER:
        raise RunFormatError(
            path, line, f"{what} {_short(value)} is out of range (at most {MAX_ABS_NUMBER:g})"
        )
    return number


def as_int(value: Any, what: str, path: Path | str, line: int | None, lo: int, hi: int) -> int:
    """An integer field in ``[lo, hi]``; anything else is refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RunFormatError(path, line, f"{what} must be an integer, got {_short(value)}")
    if not lo <= value <= hi:
        raise RunFormatError(path, line, f"{what} {_short(value)} is out of range [{lo}, {hi}]")
    return value


def _short(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 96:
        return f"(an integer of {value.bit_length():,} bits)"  # str() refuses 4,300+ digits
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
