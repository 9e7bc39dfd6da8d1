"""The "why they differ" view: an analysis body's ``differences`` for two methods, as HTML.

For each reason (:mod:`gmts_core.analysis.difference_reasons`) a row with how many tokens each
method selects alone for it and that count's share of the method's own selection budget, and a
``<details>`` list of those tokens as buttons; ``static/gmts.js`` turns a click on one into the
token's pinned panel (or says which group holds it). Only arranges numbers of the result; the
one renderer of Explore, the Runs step view and the HTML report.
"""

from __future__ import annotations

from html import escape
from typing import Any

from app.ui.render import Json, groups_of, visible_text

MAX_LISTED = 60  # token buttons per reason (the count says how many there are)


def pair_differences(result: Json | None, methods: tuple[str, str]) -> tuple[Json, bool] | None:
    """The body's differences entry for the two methods, and whether it is stored as (b, a)."""
    a, b = methods
    for d in (result or {}).get("differences") or []:
        if (d.get("method_a"), d.get("method_b")) == (a, b):
            return d, False
        if (d.get("method_a"), d.get("method_b")) == (b, a):
            return d, True
    return None


def _token_text(result: Json, ref: Json, prefix: str = "") -> str:
    try:
        group = groups_of(result)[int(ref[prefix + "group"])]
        answer = group["answers"][int(ref[prefix + "answer"])]
        return str(answer["tokens"][int(ref[prefix + "position"])]["text"])
    except (KeyError, IndexError, TypeError, ValueError):
        return "?"


def _token_button(result: Json, r: Json) -> str:
    """A token's button; its title names the token it is compared with (the other method's
    cut token), or says the other method keeps none there."""
    where = f"group {int(r['group'])}, answer #{int(r['answer'])}, position {int(r['position'])}"
    if int(r["reference_group"]) < 0:
        title = f"{where}; the other method keeps no token where this one competes"
    else:
        versus = escape(repr(_token_text(result, r, "reference_")))
        title = (
            f"{where}; compared with {versus} (group {int(r['reference_group'])}, answer "
            f"#{int(r['reference_answer'])}), the last token the other method keeps there "
            "(its cut)"
        )
    return (
        f'<button type="button" class="why-tok" data-group="{int(r["group"])}" '
        f'data-answer="{int(r["answer"])}" data-pos="{int(r["position"])}" '
        f'title="{title}">{visible_text(_token_text(result, r))}</button>'
    )


def _token_buttons(result: Json, refs: list[Json], method: str) -> str:
    mine = [r for r in refs if r.get("selected_by") == method]
    buttons = [_token_button(result, r) for r in mine[:MAX_LISTED]]
    more = (
        f'<span class="why-more">+{len(mine) - MAX_LISTED} more</span>'
        if len(mine) > MAX_LISTED
        else ""
    )
    return "".join(buttons) + more


def _share(x: Any) -> str:
    return f"{100 * float(x):.0f}%" if isinstance(x, int | float) else "—"


def why_differ_html(
    result: Json | None,
    methods: tuple[str, str],
    title: bool = True,
    element_id: str = "why-differ",
) -> str:
    """The view for Method A and B (empty notice when the body has no differences for them);
    ``element_id`` tells the views of two tabs apart (Explore's, a Runs step's)."""
    a, b = methods
    if a == b:
        return '<div class="why-differ placeholder">Choose two different methods to compare.</div>'
    found = pair_differences(result, methods)
    if found is None or result is None:
        return (
            '<div class="why-differ placeholder">No "why they differ" figures for this pair.</div>'
        )
    d, swapped = found
    sel = (d["selected_b"], d["selected_a"]) if swapped else (d["selected_a"], d["selected_b"])
    only = (d["only_b"], d["only_a"]) if swapped else (d["only_a"], d["only_b"])
    ea, eb = escape(a), escape(b)
    lead = (
        f'<p class="why-lead">{ea} selects <b>{sel[0]}</b> tokens, {eb} <b>{sel[1]}</b>; both '
        f"<b>{d['both']}</b>. Only {ea}: <b>{only[0]}</b> · only {eb}: <b>{only[1]}</b>. "
        "Each token is compared with the last token the other method keeps where it competes "
        "(its cut): the factor of w·|A|·g that sets them apart is its reason. Open a row for "
        "its tokens.</p>"
    )
    rows, absent = [], []
    for r in d.get("reasons") or []:
        if not r["count"]:  # a reason no token has: named in one line under the table
            absent.append(escape(r["label"]))
            continue
        n_a, n_b = (r["count_b"], r["count_a"]) if swapped else (r["count_a"], r["count_b"])
        s_a, s_b = (r["share_b"], r["share_a"]) if swapped else (r["share_a"], r["share_b"])
        zero = (
            f" ({r['zero_signal_group']} in zero-signal groups)"
            if r.get("zero_signal_group")
            else ""
        )
        tokens = (
            f'<div class="why-tokens"><span class="why-side">only {ea}:</span> '
            f"{_token_buttons(result, r['tokens'], a) or '—'}</div>"
            f'<div class="why-tokens"><span class="why-side">only {eb}:</span> '
            f"{_token_buttons(result, r['tokens'], b) or '—'}</div>"
        )
        rows.append(
            f'<tr class="why-row" data-reason="{escape(r["key"])}"><td><details>'
            f"<summary><b>{escape(r['label'])}</b>{escape(zero)}</summary>"
            f'<p class="why-explain">{escape(r["explanation"])}</p>{tokens}</details></td>'
            f'<td class="num">{n_a}<span class="why-share">{_share(s_a)}</span></td>'
            f'<td class="num">{n_b}<span class="why-share">{_share(s_b)}</span></td></tr>'
        )
    if not rows:
        none = '<p class="why-none">Both methods select the same tokens.</p>'
    else:
        none = f'<p class="why-none">No token for: {", ".join(absent)}.</p>' if absent else ""
    head = (
        f"<thead><tr><th>reason</th><th>only {ea}<span class='why-share'>of its picks</span>"
        f"</th><th>only {eb}<span class='why-share'>of its picks</span></th></tr></thead>"
    )
    heading = f"<h4>Why they differ: {ea} vs {eb}</h4>" if title else ""
    return (
        f'<section class="why-differ" id="{escape(element_id)}" '
        'aria-label="why the methods differ">'
        f'{heading}{lead}<div class="why-scroll scroll-x"><table class="why-table">{head}<tbody>'
        f"{''.join(rows)}</tbody></table></div>{none}"
        '<div class="why-note" role="status"></div></section>'
    )
