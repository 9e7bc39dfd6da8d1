"""One colour per selection method, everywhere: Explore, Train, Compare, Proxy check, exports.

Method colours come from the Okabe-Ito palette (safe for the common colour-vision
deficiencies): a fixed table for the known methods, and for any method registered later a
deterministic pick (by a hash of its name) from Paul Tol's colour-blind-safe "muted" set, so
a new method gets the same colour on every tab, in every process, without editing this file.
Answers (which are not methods) take their colours from a separate set so a ring in a
method's colour never looks like an answer's dot. Pure Python: no Gradio, no plotly.
"""

from __future__ import annotations

import hashlib

OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
METHOD_COLORS: dict[str, str] = {
    "entropy": "#E69F00",  # orange
    "gmts": "#0072B2",  # blue
    "gmts_entropy": "#009E73",  # bluish green
    "surprisal": "#D55E00",  # vermillion
    "gmts_paper": "#CC79A7",  # reddish purple
    "random": "#7F7F7F",  # grey: a control, not a method to prefer
    "all": "#000000",  # black: plain GRPO, every token
}
# Paul Tol's "muted" qualitative set (colour-blind safe), for methods not in the table
FALLBACK_COLORS = (
    "#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255",
    "#AA4499",
)  # fmt: skip
# answers in scatter/position charts: Tol's "light" set, kept apart from the method colours
ANSWER_COLORS = (
    "#77AADD", "#EE8866", "#EEDD88", "#FFAABB", "#99DDFF", "#44BB99", "#BBCC33", "#AAAA00",
    "#DDDDDD",
)  # fmt: skip
NEUTRAL = "#999999"  # "all tokens" and other non-method series
POSITIVE, NEGATIVE = "#009E73", "#D55E00"  # advantage above / below zero


def method_color(method: str) -> str:
    """The colour of ``method``: from the table, else a stable pick by a hash of the name."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    digest = hashlib.sha256(method.encode("utf-8")).digest()
    return FALLBACK_COLORS[digest[0] % len(FALLBACK_COLORS)]


# past the colours, answers differ by marker symbol (scatter) and line dash (position curves):
# (colour, symbol, dash) is distinct for the first len(ANSWER_COLORS) x 4 = 36 answers
ANSWER_SYMBOLS = ("circle", "diamond", "triangle-up", "x")
ANSWER_DASHES = ("solid", "dash", "dot", "dashdot")


def answer_color(index: int) -> str:
    return ANSWER_COLORS[index % len(ANSWER_COLORS)]


def answer_symbol(index: int) -> str:
    """The marker symbol of answer ``index``: the same colour comes back with another symbol."""
    return ANSWER_SYMBOLS[(index // len(ANSWER_COLORS)) % len(ANSWER_SYMBOLS)]


def answer_dash(index: int) -> str:
    """The line dash of answer ``index`` (position curves), like :func:`answer_symbol`."""
    return ANSWER_DASHES[(index // len(ANSWER_COLORS)) % len(ANSWER_DASHES)]


def rgba(hex_color: str, alpha: float) -> str:
    """``#RRGGBB`` with an opacity, as CSS ``rgba(...)``."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha:g})"


def css_vars(method_a: str, method_b: str) -> str:
    """The inline CSS variables that colour the token marks of methods A and B."""
    return f"--gmts-a:{method_color(method_a)};--gmts-b:{method_color(method_b)}"
