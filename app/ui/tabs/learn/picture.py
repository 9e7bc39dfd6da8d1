""" "RLVR in one picture": an inline SVG of one group's round of RLVR, drawn from its numbers.

prompt -> G sampled answers (one box each, green when rewarded) -> the reward rule -> each
answer's advantage as a bar up (pushed up) or down (pushed down) -> one update. Escaped SVG
text, no external asset, no Gradio.
"""

from __future__ import annotations

from html import escape

from app.ui.render import Json

WIDTH, ROW, TOP = 360, 22, 28  # px: the drawing's width, one answer's row, the header
RIGHT, WRONG, BAR = "#009e73", "#d55e00", 40  # Okabe-Ito green / vermillion; longest bar (px)


def _text(x: float, y: float, s: str, anchor: str = "start", size: int = 11) -> str:
    return (
        f'<text x="{x:.0f}" y="{y:.0f}" font-size="{size}" text-anchor="{anchor}">'
        f"{escape(s)}</text>"
    )


def rlvr_picture(group: Json, max_rows: int = 8) -> str:
    """The picture for ``group`` (at most ``max_rows`` answers drawn; the rest counted)."""
    answers = group.get("answers") or []
    shown = answers[:max_rows]
    big = max((abs(float(a.get("advantage") or 0.0)) for a in shown), default=0.0) or 1.0
    height = TOP + ROW * max(len(shown), 1) + (ROW if len(answers) > max_rows else 0) + 8
    mid = TOP + ROW * max(len(shown), 1) / 2
    parts = [
        _text(4, 14, "prompt", size=12),
        _text(92, 14, f"{len(answers)} answers", size=12),
        _text(205, 14, "reward", "middle", 12),
        _text(282, 14, "advantage", "middle", 12),
        f'<rect x="2" y="{mid - 14:.0f}" width="64" height="28" rx="4" fill="#eef" stroke="#446"/>',
        _text(34, mid + 4, "prompt", "middle"),
    ]
    for i, a in enumerate(shown):
        y = TOP + ROW * i
        r = float(a.get("reward") or 0.0)
        adv = float(a.get("advantage") or 0.0)
        colour = RIGHT if r > 0 else WRONG
        bar = BAR * abs(adv) / big
        parts += [
            f'<line x1="66" y1="{mid:.0f}" x2="90" y2="{y + ROW / 2:.0f}" stroke="#999"/>',
            f'<rect x="90" y="{y + 3}" width="90" height="{ROW - 6}" rx="3" fill="#fff" '
            f'stroke="{colour}" stroke-width="2"/>',
            _text(135, y + ROW / 2 + 4, f"answer #{a.get('index', i)}", "middle", 10),
            _text(205, y + ROW / 2 + 4, f"{r:g}", "middle"),
            f'<rect x="{282 if adv >= 0 else 282 - bar:.1f}" y="{y + 5}" width="{bar:.1f}" '
            f'height="{ROW - 10}" fill="{RIGHT if adv > 0 else WRONG}"/>',
            _text(330, y + ROW / 2 + 4, f"{adv:+.2f}", "start", 10),
        ]
    if len(answers) > max_rows:
        parts.append(_text(135, TOP + ROW * len(shown) + 14, f"+{len(answers) - max_rows} more"))
    parts.append(f'<line x1="282" y1="{TOP - 4}" x2="282" y2="{height - 6}" stroke="#333"/>')
    label = (
        f"{len(answers)} answers to one prompt, each checked by the reward rule; rewarded "
        "answers are pushed up (bar right of the line), the others pushed down (left)."
    )
    return (
        f'<svg class="rlvr-picture" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" style="max-width:{WIDTH}px">'
        f"<title>{escape(label)}</title>{''.join(parts)}</svg>"
    )
