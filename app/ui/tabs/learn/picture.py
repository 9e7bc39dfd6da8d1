""" "RLVR in one picture": one group's round of RLVR, drawn from its numbers in plain HTML.

prompt -> G sampled answers (one box each, green when rewarded) -> the reward rule -> each
answer's advantage as a bar to the right of the axis (pushed up) or to the left (pushed down)
-> one update. Boxes and bars are styled ``<div>``s (static/gmts.css): no SVG, no script, no
external asset, every text escaped, so the picture is as inert as the rest of the page.
"""

from __future__ import annotations

from html import escape

from app.ui.render import Json

RIGHT, WRONG = "#009e73", "#d55e00"  # Okabe-Ito bluish green / vermillion


def _row(index: int, reward: float, advantage: float, biggest: float) -> str:
    colour = RIGHT if reward > 0 else WRONG
    share = 100 * abs(advantage) / biggest  # % of the half-axis
    side = "up" if advantage > 0 else "down"
    bar = (
        f'<span class="rp-bar rp-{side}" style="width:{share / 2:.1f}%;'
        f'background:{RIGHT if advantage > 0 else WRONG}"></span>'
        if advantage
        else ""
    )
    return (
        f'<div class="rp-row"><span class="rp-answer" style="border-color:{colour}">answer '
        f'#{index}</span><span class="rp-reward">{reward:g}</span>'
        f'<span class="rp-adv">{bar}<span class="rp-axis"></span></span>'
        f'<span class="rp-num">{advantage:+.2f}</span></div>'
    )


def rlvr_picture(group: Json, max_rows: int = 8) -> str:
    """The picture for ``group`` (at most ``max_rows`` answers drawn; the rest counted)."""
    answers = group.get("answers") or []
    shown = answers[:max_rows]
    biggest = max((abs(float(a.get("advantage") or 0.0)) for a in shown), default=0.0) or 1.0
    rows = "".join(
        _row(
            int(a.get("index", i)),
            float(a.get("reward") or 0.0),
            float(a.get("advantage") or 0.0),
            biggest,
        )
        for i, a in enumerate(shown)
    )
    more = (
        f'<div class="rp-more">+{len(answers) - max_rows} more</div>'
        if len(answers) > max_rows
        else ""
    )
    label = (
        f"{len(answers)} answers to one prompt, each checked by the reward rule; rewarded "
        "answers are pushed up (bar right of the axis), the others pushed down (left)."
    )
    return (
        f'<div class="rlvr-picture" role="img" aria-label="{escape(label)}">'
        '<div class="rp-prompt">prompt</div><div class="rp-answers">'
        f'<div class="rp-row rp-head"><span class="rp-answer">{len(answers)} answers</span>'
        '<span class="rp-reward">reward</span><span class="rp-adv">advantage</span>'
        f'<span class="rp-num"></span></div>{rows}{more}</div></div>'
    )
