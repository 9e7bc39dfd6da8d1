"""The Train tab's last batch as HTML: each answer token shaded by how much a GRPO step changed
its log-probability (up or down), selected tokens marked, a few prompts at most (pure, no Gradio;
escaped like :mod:`app.ui.render`)."""

from __future__ import annotations

from app.palette import css_vars
from app.ui.render import Json, data_attr, fmt, placeholder, visible_text

CHANGE_UP, CHANGE_DOWN = "0, 158, 115", "213, 94, 0"  # Okabe-Ito bluish green / vermillion


def _change_tip(tok: Json, answer: Json) -> str:
    return "\n".join(
        [
            f"group {answer.get('group', 0)} · answer #{answer.get('index', 0)} · position "
            f"{tok.get('position')} · {tok.get('text', '')!r}",
            f"selected for training: {'yes' if tok.get('selected') else 'no'}",
            f"log p before {fmt(tok.get('logprob_before'), 3)} → after "
            f"{fmt(tok.get('logprob_after'), 3)} (Δ {fmt(tok.get('logprob_change'), 3)})",
        ]
    )


def render_change_token(tok: Json, answer: Json, scale: float) -> str:
    """A token shaded by its log-prob change (green up, vermillion down), selected underlined."""
    change = tok.get("logprob_change")
    level = 0.0 if change is None or scale <= 0 else min(abs(change) / scale, 1.0)
    rgb = CHANGE_UP if (change or 0.0) >= 0 else CHANGE_DOWN
    classes = "tok sel-a mark-a" if tok.get("selected") else "tok"
    style = f"--lv:{level:.3f};background:rgba({rgb},{0.06 + 0.8 * level:.3f})"
    return (
        f'<span class="{classes}" style="{style}"{data_attr("change", change)}'
        f"{data_attr('tip', _change_tip(tok, answer))}>{visible_text(tok.get('text', ''))}</span>"
    )


def _mean_change(tokens: list[Json], selected: bool) -> float | None:
    vals = [
        c
        for t in tokens
        if bool(t.get("selected")) == selected and (c := t.get("logprob_change")) is not None
    ]
    return sum(vals) / len(vals) if vals else None


MAX_CHANGE_GROUPS = 4  # prompts of the last batch drawn (16 x 8 answers would be ~2 MB of HTML)


def render_batch_changes(
    answers: list[Json], max_groups: int = MAX_CHANGE_GROUPS, method: str | None = None
) -> str:
    """The last training batch: its first ``max_groups`` prompts' answers, every token shaded
    by its log-prob change (the shade's scale is the largest |change| measured: the whole
    batch's, or the drawn prompts' where the step measured only those, as the Train tab asks);
    the trained tokens' mark takes ``method``'s colour."""
    if not answers:
        return placeholder("Run a step to see the batch it trained on.")
    groups = list(dict.fromkeys(a.get("group") for a in answers))
    shown = set(groups[:max_groups])
    changes = [
        abs(c)
        for a in answers
        for t in a.get("tokens", [])
        if (c := t.get("logprob_change")) is not None
    ]
    scale = max(changes, default=0.0)
    style = f' style="{css_vars(method, method)}"' if method else ""
    parts = [
        f'<div class="gmts-view gmts-changes"{style}><div class="legend">'
        f'<span class="legend-mark"><span class="sample mark-a">selected</span> for training '
        "(solid underline)</span>"
        f'<span class="legend-scale">shade: log-prob change after the update, '
        f'<span style="background:rgba({CHANGE_UP},0.86)">&nbsp;up&nbsp;</span> / '
        f'<span style="background:rgba({CHANGE_DOWN},0.86)">&nbsp;down&nbsp;</span>, '
        f"full shade at |Δ| = {fmt(scale, 3)} nats</span></div>"
    ]
    if len(groups) > len(shown):
        parts.append(
            f'<div class="batch-note">showing the first {len(shown)} of the batch\'s '
            f"{len(groups)} prompts</div>"
        )
    group = None
    for ans in (a for a in answers if a.get("group") in shown):
        if ans.get("group") != group:
            group = ans.get("group")
            parts.append(_change_group_head(ans, [a for a in answers if a.get("group") == group]))
        parts.append(_render_change_answer(ans, scale))
    parts.append("</div>")
    return "".join(parts)


def _change_group_head(first: Json, group: list[Json]) -> str:
    """The group's prompt, and a plain remark when its answers carry no learning signal."""
    zero = all((a.get("advantage") or 0.0) == 0.0 for a in group)
    remark = (
        ' <span class="adv-zero">— all rewards equal: no learning signal, no gradient</span>'
        if zero
        else ""
    )
    return (
        f'<div class="prompt"><span class="label">group {int(first.get("group", 0))}</span> '
        f'<span class="prompt-text">{visible_text(first.get("prompt", ""))}</span>{remark}</div>'
    )


def _render_change_answer(ans: Json, scale: float) -> str:
    tokens = ans.get("tokens", [])
    adv = ans.get("advantage") or 0.0
    sign = "pos" if adv > 0 else "neg" if adv < 0 else "zero"
    head = (
        f'<div class="ans-head"><span class="ans-id">#{int(ans.get("index", 0))}</span> '
        f"reward <b>{fmt(ans.get('reward'))}</b> · advantage "
        f'<b class="adv-{sign}">{fmt(adv, 3)}</b> · mean Δ log p: selected '
        f"<b>{fmt(_mean_change(tokens, True), 3)}</b>, others "
        f"{fmt(_mean_change(tokens, False), 3)}</div>"
    )
    spans = "<wbr>".join(render_change_token(t, ans, scale) for t in tokens)
    return (
        f'<div class="answer" data-answer="{int(ans.get("index", 0))}">{head}'
        f'<div class="tokens">{spans}</div></div>'
    )
