"""The batch view of Explore (issue 10), free of Gradio: several prompts analysed as one batch.

Prompts are typed as blocks separated by ``---`` lines; a block's last line ``=> 85`` gives that
prompt's reference (otherwise the form's reference is used). With selection scope ``batch`` the
methods rank all tokens of all groups together, as trainers do, which is where zero-signal
groups make entropy selection waste its budget. The overview table and the budget chart only
arrange numbers of the result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from app.palette import method_color
from app.services.catalog import demo_problems
from app.ui.charts import LAYOUT, TWO_LINE_TITLE_TOP
from app.ui.choices import EXPLICIT
from app.ui.render import Json, fmt, groups_of
from app.ui.tables import card_table
from app.ui.tabs.explore.view import ExploreForm, common_fields, sampling_fields
from gmts_core.errors import InvalidInputError

BLOCK_SEPARATOR = re.compile(r"^\s*-{3,}\s*$", re.MULTILINE)
REFERENCE_PREFIX = "=>"
DEMO_BATCH_SIZE = 4


def parse_batch(text: str) -> list[tuple[str, str | None]]:
    """``(prompt, reference or None)`` for each block of the batch text."""
    groups = []
    for block in BLOCK_SEPARATOR.split(text.replace("\r\n", "\n")):
        lines = block.strip("\n").split("\n")
        reference = None
        if lines and lines[-1].strip().startswith(REFERENCE_PREFIX):
            reference = lines.pop().strip()[len(REFERENCE_PREFIX) :].strip() or None
        prompt = "\n".join(lines).strip("\n")
        if prompt.strip():
            groups.append((prompt, reference))
    return groups


def format_batch(items: list[tuple[str, str | None]]) -> str:
    """The batch text of ``(prompt, reference)`` pairs (inverse of :func:`parse_batch`)."""
    blocks = [p + (f"\n{REFERENCE_PREFIX} {r}" if r is not None else "") for p, r in items]
    return "\n---\n".join(blocks)


def demo_batch_text(seed: int = 0, n: int = DEMO_BATCH_SIZE) -> str:
    """``n`` held-out prompts of the demo arithmetic task with their references."""
    problems = demo_problems(n, seed=seed, split="heldout")
    return format_batch([(p.prompt, p.reference) for p in problems])


def build_batch_request(form: ExploreForm, batch_text: str, available: Sequence[str] = ()) -> Json:
    """The ``POST /v1/analyze`` batch body: one sampled group per prompt."""
    items = parse_batch(batch_text)
    if len(items) < 1:
        raise InvalidInputError("enter prompts separated by '---' lines (or press Demo batch)")
    if form.reward_kind == EXPLICIT:
        raise InvalidInputError("a batch is rewarded by a rule: choose a reward rule, not explicit")
    groups = []
    for i, (prompt, ref) in enumerate(items):
        reference = ref if ref is not None else form.reference.strip()
        if not reference:
            raise InvalidInputError(
                f"prompt {i} has no reference: end its block with '=> answer' or fill Reference"
            )
        groups.append(
            {"prompt": prompt, "reward": {"kind": form.reward_kind, "reference": reference}}
        )
    body = common_fields(form, available)
    body.update(sampling_fields(form))
    body["groups"] = groups
    return body


OVERVIEW_HEADERS = ["group", "prompt", "rewards", "advantages", "no signal", "budget A", "budget B"]


def _short(text: str, n: int = 28) -> str:
    one = text.replace("\n", " ⏎ ")
    return one if len(one) <= n else one[: n - 1] + "…"


def overview_rows(result: Json, methods: tuple[str, str]) -> list[list[str]]:
    """One row per group: rewards, advantages, zero-signal flag, each method's budget share."""
    shares = (result.get("summary") or {}).get("budget_share", {})
    rows = []
    for g in groups_of(result):
        gi = int(g.get("index", 0))
        answers = g.get("answers", [])
        budget = [shares.get(m, [])[gi] if gi < len(shares.get(m, [])) else None for m in methods]
        rows.append(
            [
                str(gi),
                _short(g.get("prompt", "")),
                " ".join(fmt(a.get("reward"), 2) for a in answers),
                " ".join(fmt(a.get("advantage"), 2) for a in answers),
                "yes" if (g.get("summary") or {}).get("zero_signal") else "",
                *("—" if b is None else f"{100 * b:.0f}%" for b in budget),
            ]
        )
    return rows


def overview_headers(methods: tuple[str, str]) -> list[str]:
    return [*OVERVIEW_HEADERS[:5], f"budget {methods[0]}", f"budget {methods[1]}"]


def overview_html(result: Json, methods: tuple[str, str]) -> str:
    """The groups' overview as a table (a card per group on a phone)."""
    return card_table(overview_headers(methods), overview_rows(result, methods), "groups")


def group_choices(result: Json | None) -> list[tuple[str, int]]:
    """Drill-down choices: ``(label, group index)``."""
    if not result:
        return []
    return [
        (f"group {g.get('index', i)}: {_short(g.get('prompt', ''), 40)}", int(g.get("index", i)))
        for i, g in enumerate(groups_of(result))
    ]


def budget_chart(result: Json, methods: tuple[str, str]) -> go.Figure:
    """Share of each method's selected tokens that lands in each group; zero-signal hatched."""
    groups = groups_of(result)
    shares = (result.get("summary") or {}).get("budget_share", {})
    zero = [bool((g.get("summary") or {}).get("zero_signal")) for g in groups]
    x = [
        f"group {g.get('index', i)}" + ("<br>(no signal)" if z else "")  # two lines: a phone
        for i, (g, z) in enumerate(zip(groups, zero, strict=True))
    ]
    fig = go.Figure()
    for m in dict.fromkeys(methods):
        fig.add_trace(
            go.Bar(
                x=x,
                y=shares.get(m, []),
                name=m,
                marker_color=method_color(m),
                marker_pattern_shape=["x" if z else "" for z in zero],
                hovertemplate="%{x}<br>" + m + ": %{y:.0%} of its selection<extra></extra>",
            )
        )
    wasted = (result.get("summary") or {}).get("wasted_share", {})
    title = "Selection budget per group<br>wasted: " + ", ".join(
        f"{m} {100 * wasted[m]:.0f}%" for m in methods if m in wasted
    )
    fig.update_layout(title=title, barmode="group", yaxis_tickformat=".0%", **LAYOUT)
    fig.update_layout(margin_t=TWO_LINE_TITLE_TOP)
    return fig


def batch_notes(result: Json | None) -> Any:
    """Markdown line naming the zero-signal groups (escaped by Gradio's Markdown sanitizer)."""
    if not result or "groups" not in result:
        return ""
    s = result.get("summary") or {}
    return (
        f"{s.get('num_groups')} groups, {s.get('num_tokens')} tokens, k = {s.get('k')} "
        f"({s.get('scope')} scope); {s.get('num_zero_signal_groups', 0)} group(s) without "
        "learning signal."
    )
