"""The token renderer: one analysed group as an HTML string (pure, no Gradio).

Every answer token becomes ``<span class="tok" data-...>``, its background shaded by the chosen
score, with the selections of two methods marked in a colour-blind-safe way (line position and
style, not colour alone): selected by A only (solid underline), by B only (dashed overline), by
both (both lines and bold). Spaces and newlines are drawn (``␣``, ``⏎``) yet lines still wrap.
All text, including tooltip data in ``data-*`` attributes, is HTML-escaped; the tooltip itself
is drawn by ``static/gmts.js`` from ``data-tip`` using ``textContent``.

The input is the JSON form of an analysis (``app.services.responses.analysis_json``, the body of
``POST /v1/analyze``), so a local and a remote backend render identically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any

from app.palette import css_vars
from app.ui.ranks import UNKNOWN_POOL, RankPool, rank_lines, rank_pool
from app.ui.token_numbers import UNTRAINED_TEXT, logged_lines, logprob_diff, ratio_distance
from app.ui.token_numbers import untrained as is_untrained

Json = dict[str, Any]


@dataclass(frozen=True)
class ScoreSpec:
    """How to shade tokens by one score."""

    label: str
    value: Callable[[Json], float | None]
    higher_is_stronger: bool
    help: str


COLOR_BY: dict[str, ScoreSpec] = {
    "entropy": ScoreSpec(
        "entropy H (nats)", lambda t: t.get("entropy"), True, "darker = more uncertain"
    ),
    "grad_proxy": ScoreSpec(
        "gradient proxy |A|·w·g", lambda t: t.get("grad_proxy"), True, "darker = larger gradient"
    ),
    "gmts_rank": ScoreSpec(
        "GMTS rank", lambda t: t.get("ranks", {}).get("gmts"), False, "darker = ranked higher"
    ),
    "logprob": ScoreSpec(
        "log-probability log p", lambda t: t.get("logprob"), False, "darker = less likely"
    ),
    "logprob_diff": ScoreSpec(
        "|Δ log p| trainer vs inference (nats)", logprob_diff, True, "darker = more mismatch"
    ),
    "importance_ratio": ScoreSpec(
        "|importance ratio − 1|", ratio_distance, True, "darker = further from on-policy"
    ),
}

# a space is drawn as an open box: a middle dot read as a minus sign in "8 ·borrow" (and as a
# product between numbers), struck through in a zero-signal group all the more
SPACE_GLYPH = "\u2423"  # ␣

ZERO_SIGNAL_TEXT = (
    "No learning signal: every answer got the same reward, so every advantage is 0 and no "
    "token of this group has a gradient. Any selection here spends budget on tokens that "
    "cannot move the model."
)


def fmt(x: float | None, digits: int = 4) -> str:
    """A number for people: compact, signed minus, '—' when missing."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.{digits}g}".replace("-", "−")


def groups_of(result: Json) -> list[Json]:
    """The groups of a result in batch form, whether it came in single- or batch form."""
    if result.get("groups") is not None:  # a single-form result dumps "groups": null
        return list(result["groups"])
    return [
        {
            "index": 0,
            "prompt": result.get("prompt", ""),
            "answers": result.get("answers", []),
            "summary": result.get("summary", {}),
        }
    ]


def visible_text(text: str) -> str:
    """Escaped token text with spaces, tabs and newlines drawn, keeping wrap opportunities."""
    if text == "":
        return '<span class="ws">∅</span>'
    out = []
    for ch in text:
        if ch == " ":
            out.append(f'<span class="ws">{SPACE_GLYPH}</span><wbr>')
        elif ch == "\n":
            out.append('<span class="ws">⏎</span><br>')
        elif ch == "\t":
            out.append('<span class="ws">→</span><wbr>')
        elif ch == "\r":
            out.append('<span class="ws">␍</span>')
        else:
            out.append(escape(ch))
    return "".join(out)


def score_range(tokens: list[Json], color_by: str) -> tuple[float, float]:
    """Min and max of the chosen score over ``tokens`` (0, 0 if none is finite)."""
    spec = COLOR_BY[color_by]
    vals = [v for t in tokens if (v := spec.value(t)) is not None and math.isfinite(v)]
    return (min(vals), max(vals)) if vals else (0.0, 0.0)


def shade_level(value: float | None, lo: float, hi: float, higher_is_stronger: bool) -> float:
    """Shade in [0, 1] of a value within [lo, hi]; 0 for a missing value or a flat range."""
    if value is None or not math.isfinite(value) or hi <= lo:
        return 0.0
    level = (value - lo) / (hi - lo)
    return level if higher_is_stronger else 1.0 - level


def mark_class(sel_a: bool, sel_b: bool) -> str:
    """The styling class of a token's selection mark."""
    if sel_a and sel_b:
        return "mark-both"
    return "mark-a" if sel_a else "mark-b" if sel_b else ""


def _short(x: Any) -> float | None:
    """A probability for the panel: 4 significant digits (it shows 3); None if not finite."""
    return float(f"{x:.4g}") if isinstance(x, int | float) and math.isfinite(x) else None


def token_detail(tok: Json) -> Json:
    """What the pinned panel (static/gmts.js) draws besides the tooltip's lines: the sampled
    token and its alternatives with probabilities (a GLTR-style bar chart). Read as JSON, shown
    as text. The rank lines are the tooltip's (``data-tip``), not repeated here: every byte of
    a token's markup is sent ~200 times with the page.
    """
    alts = [[a.get("text", ""), _short(a.get("prob"))] for a in tok.get("alternatives", [])]
    return {"text": tok.get("text", ""), "prob": _short(tok.get("prob")), "alternatives": alts}


def tooltip_text(
    tok: Json, answer_index: int, methods: tuple[str, str], pool: str = "", zero: bool = False
) -> str:
    """The plain-text tooltip of a token (lines separated by newlines)."""
    alts = " · ".join(
        f"{a.get('text', '')!r} {fmt(a.get('prob'), 3)}" for a in tok.get("alternatives", [])
    )
    return "\n".join(
        [
            *([UNTRAINED_TEXT] if is_untrained(tok) else []),
            f"answer #{answer_index} · position {tok.get('position')} · id {tok.get('id')} · "
            f"{tok.get('text', '')!r}",
            f"prob {fmt(tok.get('prob'), 3)} · logprob {fmt(tok.get('logprob'), 3)}",
            f"entropy {fmt(tok.get('entropy'), 3)} nats",
            f"grad_norm {fmt(tok.get('grad_norm'), 3)} · grad_proxy {fmt(tok.get('grad_proxy'))}",
            *logged_lines(tok),
            *rank_lines(tok, methods, pool or UNKNOWN_POOL, zero),
            f"top alternatives: {alts or '—'}",
        ]
    )


def data_attr(name: str, value: Any) -> str:
    """``data-name="value"``: the value escaped for a double-quoted attribute (``&``, ``<``,
    ``>`` and ``"``; a ``'`` stays as it is, which keeps the tooltips short)."""
    text = "" if value is None else str(value)
    return f' data-{name}="{escape(text, quote=False).replace(chr(34), "&quot;")}"'


def _json_attr(name: str, value: Any) -> str:
    """``data-name='json'``: compact JSON in a single-quoted attribute, so its many ``"`` need
    no entity (``&``, ``<``, ``>`` and ``'`` are escaped)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return f" data-{name}='{escape(text, quote=False).replace(chr(39), '&#x27;')}'"


def render_token(
    tok: Json,
    answer_index: int,
    level: float,
    methods: tuple[str, str],
    pool: str = "",
    zero: bool = False,
) -> str:
    """One focusable ``<span class="tok">`` with data attributes, shade and selection classes.

    ``sel-a``/``sel-b`` say what the analysis flagged and the marks (``mark-*``) show it; in a
    zero-signal group a selected token is also ``tok-wasted`` (its budget cannot move the
    model). Every token has ``tabindex="-1"``: the token area is one Tab stop (its first token,
    see :func:`render_group`) and the arrow keys move within it (static/gmts.js).
    """
    a, b = methods
    sel = {} if (masked := is_untrained(tok)) else tok.get("selected", {})  # never marked
    sel_a, sel_b = bool(sel.get(a)), bool(sel.get(b))
    classes = ["tok"] + (["tok-untrained"] if masked else [])
    classes += ["sel-a"] if sel_a else []
    classes += ["sel-b"] if sel_b else []
    classes += [c] if (c := mark_class(sel_a, sel_b)) else []
    classes += ["tok-wasted"] if zero and (sel_a or sel_b) else []
    classes += ["tok-empty"] if tok.get("text", "") == "" else []
    ranks = tok.get("ranks", {})
    # the numbers are in the tooltip (and the exports); the attributes carry what scripts and
    # tests look tokens up by
    attrs = (
        data_attr("answer", answer_index)
        + data_attr("pos", tok.get("position"))
        + data_attr("id", tok.get("id"))
        + data_attr("rank-a", ranks.get(a))
        + data_attr("rank-b", ranks.get(b))
        + data_attr("tip", tooltip_text(tok, answer_index, methods, pool, zero))
        + _json_attr("detail", token_detail(tok))
    )
    return (
        f'<span class="{" ".join(classes)}" tabindex="-1" style="--lv:{level:.3f}"{attrs}>'
        f"{visible_text(tok.get('text', ''))}</span>"
    )


def _verdict_text(ans: Json) -> str:
    d = ans.get("reward_detail") or {}
    if not d or d.get("rule") == "explicit":
        return "explicit reward"
    return (
        f"{d.get('rule')}: extracted {d.get('extracted')!r}, reference {d.get('reference')!r}, "
        f"{d.get('verdict')}"
    )


def answer_header(ans: Json, methods: tuple[str, str], zero: bool = False) -> str:
    """Reward, advantage, weight, length and selected counts of one answer (escaped HTML)."""
    counts = ans.get("selected_count") or {}
    adv = ans.get("advantage") or 0.0
    sign = "pos" if adv > 0 else "neg" if adv < 0 else "zero"
    selects = [f"{escape(m)} selects <b>{counts.get(m, 0)}</b>" for m in dict.fromkeys(methods)]
    if zero:  # what is selected here is wasted budget
        selects.append("no gradient here: a selection spent here is wasted")
    facts = [
        f"reward <b>{fmt(ans.get('reward'))}</b>",
        f'advantage <b class="adv-{sign}">{fmt(adv, 3)}</b>',
        f"weight {fmt(ans.get('weight'), 3)}",
        f"length {ans.get('length', len(ans.get('tokens', [])))}",
        *selects,
    ]
    if ans.get("finished") is False:
        facts.append("unfinished (hit max tokens)")
    return (
        f'<div class="ans-head"><span class="ans-id">#{ans.get("index", 0)}</span> '
        + " · ".join(facts)
        + f'<div class="verdict">{escape(_verdict_text(ans))}</div></div>'
    )


def render_answer(
    ans: Json,
    methods: tuple[str, str],
    color_by: str,
    lo: float,
    hi: float,
    pool: str,
    zero: bool = False,
) -> str:
    """One answer: its header and its tokens (on a hatched band in a zero-signal group).
    ``pool`` is what the ranks count over (:func:`rank_pool`; empty for answer scope)."""
    spec = COLOR_BY[color_by]
    idx = int(ans.get("index", 0))
    toks = ans.get("tokens", [])
    where = pool or RankPool(
        f"within answer #{idx} of {len(toks)} tokens",
        {m: sum(bool((t.get("selected") or {}).get(m)) for t in toks) for m in methods},
    )
    spans = [
        render_token(
            t,
            idx,
            shade_level(spec.value(t), lo, hi, spec.higher_is_stronger),
            methods,
            where,
            zero,
        )  # fmt: skip
        for t in toks
    ]
    band = " no-gradient" if zero else ""
    return (
        f'<div class="answer" data-answer="{idx}">{answer_header(ans, methods, zero)}'
        f'<div class="tokens{band}">{"<wbr>".join(spans)}</div></div>'
    )


def render_legend(color_by: str, lo: float, hi: float, methods: tuple[str, str]) -> str:
    """Shade scale and the three selection marks."""
    spec = COLOR_BY[color_by]
    a, b = (escape(m) for m in methods)
    ends = (fmt(lo, 3), fmt(hi, 3))  # 3 significant digits
    low, high = ends if spec.higher_is_stronger else ends[::-1]
    return (
        '<div class="legend">'
        f'<span class="legend-scale">shade: {escape(spec.label)} — {escape(spec.help)} '
        f'<span class="ramp-end">{low}</span><span class="ramp"></span>'
        f'<span class="ramp-end">{high}</span></span>'
        f'<span class="legend-mark"><span class="sample mark-both">both</span></span>'
        f'<span class="legend-mark"><span class="sample mark-a">only {a}</span> '
        "(solid underline)</span>"
        f'<span class="legend-mark"><span class="sample mark-b">only {b}</span> '
        "(dashed overline)</span>"
        f'<span class="legend-mark"><span class="ws">{SPACE_GLYPH}</span> a space, '
        '<span class="ws">⏎</span> a newline, <span class="ws">∅</span> an empty token</span>'
        "</div>"
    )


def zero_signal_banner() -> str:
    return f'<div class="zero-signal" role="alert">⚠ {escape(ZERO_SIGNAL_TEXT)}</div>'


def render_group(
    group: Json, methods: tuple[str, str], color_by: str = "entropy", *, pool: str
) -> str:
    """A whole group: prompt, legend, zero-signal banner if any, and every answer.

    ``pool`` says what a rank counts over ("of 214 tokens in the batch", with each method's
    kept count); empty for answer scope, where each answer is its own pool. Method colours come
    from the palette.
    """
    if color_by not in COLOR_BY:
        raise ValueError(f"unknown colour-by {color_by!r}; valid: {', '.join(COLOR_BY)}")
    answers = group.get("answers", [])
    tokens = [t for ans in answers for t in ans.get("tokens", [])]
    lo, hi = score_range(tokens, color_by)
    zero = (group.get("summary") or {}).get("zero_signal")
    if zero is None:
        zero = bool(answers) and all((ans.get("advantage") or 0) == 0 for ans in answers)
    parts = [
        f'<div class="gmts-view" data-group="{int(group.get("index", 0))}" '
        f'style="{css_vars(*methods)}">',
        f'<div class="prompt"><span class="label">prompt</span> '
        f'<span class="prompt-text">{visible_text(group.get("prompt", ""))}</span></div>',
        render_legend(color_by, lo, hi, methods),
        zero_signal_banner() if zero else "",
        *(render_answer(ans, methods, color_by, lo, hi, pool, bool(zero)) for ans in answers),
        "</div>",
    ]
    # one Tab stop for the whole token area: its first token (roving tabindex, gmts.js)
    return "".join(parts).replace('tabindex="-1"', 'tabindex="0"', 1)


def render_result(
    result: Json, methods: tuple[str, str], color_by: str = "entropy", group_index: int = 0
) -> str:
    """Render one group of a result (single or batch form)."""
    groups = groups_of(result)
    if not groups:
        return placeholder("The analysis has no groups.")
    gi = min(max(group_index, 0), len(groups) - 1)
    return render_group(groups[gi], methods, color_by, pool=rank_pool(result, groups[gi]))


def placeholder(message: str) -> str:
    """A short escaped notice shown where a view has nothing to show yet."""
    return f'<div class="gmts-view placeholder">{escape(message)}</div>'
