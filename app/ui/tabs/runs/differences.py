"""The "why they differ" view of one analysed step, as an HTML string (Gradio-free).

It shows the analysis' ``differences`` entry for the two marked methods
(``gmts_core.analysis.differences``): how many tokens each method selects alone, and, for each
reason the numbers give (the factor of w·|A|·g that sets the token apart from the one the other
method picks instead), the count, each method's share of its own selection
budget, and the tokens themselves (click the reason to list them: group, answer, position, the
token's text and the token the other method picks instead, which the reason compares it with).
"""

from __future__ import annotations

from html import escape
from typing import Any

Json = dict[str, Any]
MAX_LISTED = 60  # tokens listed per reason; the count says how many there are


def _token_text(groups: list[Json], ref: Json, prefix: str = "") -> str:
    try:
        group = next(g for g in groups if int(g.get("index", 0)) == ref[prefix + "group"])
        answer = group["answers"][ref[prefix + "answer"]]
        return str(answer["tokens"][ref[prefix + "position"]]["text"])
    except (StopIteration, IndexError, KeyError, TypeError):
        return ""


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f}%"


def differences_html(diff: Json, groups: list[Json]) -> str:
    """The reasons table of ``diff`` (a ``DifferencesOut`` body); ``groups`` give token texts."""
    a, b = escape(diff["method_a"]), escape(diff["method_b"])
    head = (
        f'<div class="diff-view" data-methods="{a}|{b}">'
        f'<div class="diff-title"><b>Why they differ</b>: {a} selects {diff["selected_a"]} '
        f"tokens, {b} {diff['selected_b']}; both {diff['both']}, only {a} {diff['only_a']}, "
        f"only {b} {diff['only_b']}.</div>"
    )
    rows = []
    for r in diff["reasons"]:
        if not r["count"]:
            continue
        listed = []
        for ref in r["tokens"][:MAX_LISTED]:
            text = escape(repr(_token_text(groups, ref)))
            versus = escape(repr(_token_text(groups, ref, "reference_")))
            listed.append(
                f'<li data-ref="{ref["group"]}-{ref["answer"]}-{ref["position"]}">group '
                f"{ref['group']}, answer #{ref['answer']}, position {ref['position']}: "
                f"<code>{text}</code> (only {escape(ref['selected_by'])}; compared with "
                f"<code>{versus}</code> in group {ref['reference_group']}, answer "
                f"#{ref['reference_answer']})</li>"
            )
        more = r["count"] - len(listed)
        tail = f"<li>... and {more} more</li>" if more > 0 else ""
        rows.append(
            f'<details class="diff-reason" data-reason="{escape(r["key"])}">'
            f"<summary><b>{escape(r['label'])}</b>: {r['count']} tokens "
            f"(only {a}: {r['count_a']}, {_pct(r['share_a'])} of its budget; only {b}: "
            f"{r['count_b']}, {_pct(r['share_b'])}); {r['zero_signal_group']} in zero-signal "
            f"groups</summary><p>{escape(r['explanation'])}</p><ul>{''.join(listed)}{tail}"
            "</ul></details>"
        )
    if not rows:
        rows.append("<p>Both methods select the same tokens in this step.</p>")
    return head + "".join(rows) + "</div>"
