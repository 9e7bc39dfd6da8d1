"""The Learn tab: the GMTS formulas (advantages, weights, entropy, gradient norms) in words,
each beside live numbers.

Every number shown comes from the current analysis result; the text only points at them
("this answer's advantage is −1.2, so every token's gradient is scaled by 1.2"). Output is an
HTML string in which every piece of user or model text is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

from app.services.catalog import ANALYSIS_DEFAULTS
from app.services.methods import list_method_infos
from app.ui.predict import with_predict_bar
from app.ui.render import Json, fmt, groups_of, render_result
from app.ui.tabs.learn.lesson import is_zero_signal, lesson_html
from app.ui.why_differ import why_differ_html

ADVANTAGE_FORMULAS = {
    "grpo": "A_i = (r_i − mean r) / (std r + ε)",
    "dr_grpo": "A_i = r_i − mean r",
    "rloo": "A_i = r_i − mean of the other answers' rewards",
}
WEIGHT_FORMULAS = {
    "token_mean": "w_i = 1 / (total number of answer tokens in the batch)",
    "seq_mean_token_mean": "w_i = 1 / (G · |o_i|)",
    "seq_mean_token_sum_norm": "w_i = 1 / (G · L_max)",
}


def _section(title: str, formula: str, words: str, live: str) -> str:
    """One formula card: title, formula, the idea in words, and the live numbers."""
    return (
        f'<section class="learn-card"><h3>{escape(title)}</h3>'
        f'<div class="learn-formula"><code>{escape(formula)}</code></div>'
        f'<p class="learn-words">{escape(words)}</p>'
        f'<div class="learn-live"><span class="label">your group</span> {live}</div></section>'
    )


def _tok_name(t: Json) -> str:
    return escape(repr(t.get("text", "")))


def advantage_section(group: Json, mode: str) -> str:
    answers = group.get("answers", [])
    lines = []
    for ans in answers:
        adv = ans.get("advantage") or 0.0
        if adv == 0:
            effect = "so its tokens get no gradient at all"
        else:
            direction = "pushed up (made more likely)" if adv > 0 else "pushed down"
            effect = (
                f"so every token's gradient is scaled by {fmt(abs(adv), 3)} and its tokens are "
                f"{direction}"
            )
        lines.append(
            f"<li>answer #{ans.get('index')}: reward {fmt(ans.get('reward'))}, this answer's "
            f"advantage is <b>{fmt(adv, 3)}</b>, {effect}.</li>"
        )
    mean = (group.get("summary") or {}).get("reward_mean")
    head = f"mean reward {fmt(mean, 3)}. " if mean is not None else ""
    return _section(
        "1. Rewards become group advantages",
        ADVANTAGE_FORMULAS.get(mode, mode),
        "Each answer is compared with the other answers to the same prompt. Better than the "
        "group: positive advantage; worse: negative. The advantage multiplies the gradient of "
        "every token of that answer.",
        f"{head}<ul>{''.join(lines)}</ul>",
    )


def weight_section(group: Json, aggregation: str) -> str:
    answers = group.get("answers", [])
    items = "".join(
        f"<li>answer #{a.get('index')}: {a.get('length')} tokens, w = {fmt(a.get('weight'), 3)}"
        "</li>"
        for a in answers
    )
    return _section(
        "2. Loss aggregation weight",
        WEIGHT_FORMULAS.get(aggregation, aggregation),
        "How the per-token losses are averaged. It is the same for every token of one answer, "
        "so like the advantage it scales whole answers.",
        f"aggregation <b>{escape(aggregation)}</b><ul>{items}</ul>",
    )


def _top_token(group: Json, method: str) -> tuple[Json, Json] | None:
    """The (answer, token) ranked first by ``method`` in the group."""
    best = None
    for ans in group.get("answers", []):
        for t in ans.get("tokens", []):
            r = t.get("ranks", {}).get(method)
            if r is not None and (best is None or r < best[0]):
                best = (r, ans, t)
    return (best[1], best[2]) if best else None


def gradient_section(group: Json, temperature: float) -> str:
    top = _top_token(group, "gmts")
    if is_zero_signal(group):  # every γ ties at 0: no token is "GMTS's choice" here
        live = (
            "every answer got the same reward, so every advantage is 0 and every token's γ is "
            "0: <b>no gradient here</b>, and no token is GMTS's choice. Pick a prompt whose "
            "answers split (e.g. the carry example) to see γ at work."
        )
    elif top is None:
        live = "no tokens ranked by gmts in this analysis."
    else:
        ans, t = top
        live = (
            f"GMTS's top token is {_tok_name(t)} (answer #{ans.get('index')}, position "
            f"{t.get('position')}): p = {fmt(t.get('prob'), 3)}, g = "
            f"{fmt(t.get('grad_norm'), 3)}, and its proxy γ = |{fmt(ans.get('advantage'), 3)}| "
            f"· {fmt(ans.get('weight'), 3)} · {fmt(t.get('grad_norm'), 3)} = "
            f"<b>{fmt(t.get('grad_proxy'), 3)}</b> (temperature τ = {fmt(temperature)})."
        )
    return _section(
        "3. A token's gradient magnitude",
        "g = (1/τ) · √(1 − 2p + Σ_v π_v²),   γ = w_i · |ω_t| · g,   ω_t = r_t I_t A_i + "
        "β (π_ref/π_θ − 1)",
        "g is the exact size of the gradient of log p(token) with respect to the logits (for the "
        "model's own logits, up to float32 rounding); it is large when the model was unsure or "
        "the token was unlikely. γ (grad_proxy) multiplies it by the answer's weight and the "
        "token's coefficient ω (coef): the exact size of this token's gradient in the GRPO loss "
        "at the logits, if the token is trained. Here the analysed policy sampled the answers "
        "(ratio r = 1, nothing clipped) and, without a KL term (β = 0), ω = A_i, so "
        "γ = |A_i| · w_i · g. During later PPO-style updates r moves away from 1, clipped tokens "
        "(I = 0) get no gradient, and a KL term adds β (π_ref/π_θ − 1). GMTS trains on the "
        "tokens with the largest γ.",
        live,
    )


def gini_section(summary: Json) -> str:
    rho = (summary.get("spearman_entropy_grad") or {}).get("within_answer_median")
    return _section(
        "4. Why entropy tracks the gradient within one answer",
        "E_y[g²] = (1 − Σ_v π_v²) / τ²   (the Gini impurity)   vs   H = −Σ_v π_v log π_v",
        "On average over the sampled token, the squared gradient is the Gini impurity of the "
        "next-token distribution. Gini impurity and entropy are close cousins: both are 0 when "
        "the model is certain and largest when it is uniform. Within one answer A and w are "
        "fixed, so ranking by entropy and by gradient mostly agree.",
        f"median Spearman correlation of entropy and γ within each answer: <b>{fmt(rho, 3)}</b>.",
    )


def misrank_section(group: Json, summary: Json, methods: tuple[str, str]) -> str:
    rho = summary.get("spearman_entropy_grad") or {}
    a, b = methods
    picks = []
    for m, other in ((a, b), (b, a)):
        only = [
            (ans, t)
            for ans in group.get("answers", [])
            for t in ans.get("tokens", [])
            if t.get("selected", {}).get(m) and not t.get("selected", {}).get(other)
        ]
        if only:
            ans, t = min(only, key=lambda p: p[1].get("ranks", {}).get(m, 10**9))
            picks.append(
                f"<li>{escape(m)} keeps {_tok_name(t)} (answer #{ans.get('index')}, H = "
                f"{fmt(t.get('entropy'), 3)}, A = {fmt(ans.get('advantage'), 3)}, γ = "
                f"{fmt(t.get('grad_proxy'), 3)}), which {escape(other)} leaves out.</li>"
            )
    example = f"<ul>{''.join(picks)}</ul>" if picks else f"{escape(a)} and {escape(b)} agree here."
    if is_zero_signal(group):
        example = " All rewards are equal here: every γ is 0, so no selection means anything."
    return _section(
        "5. Why entropy misranks tokens across answers",
        "γ = |A_i| · w_i · g   —   A_i and w_i change from answer to answer, H does not see them",
        "A confident token in an answer with a large |advantage| can carry a bigger gradient than "
        "an uncertain token in an answer whose advantage is near 0. Entropy cannot tell them "
        "apart; the gradient magnitude can. Tokens of a group whose rewards are all equal have "
        "γ = 0 however high their entropy.",
        f"Spearman(H, γ) over the whole group: <b>{fmt(rho.get('batch'), 3)}</b> vs within "
        f"answers: <b>{fmt(rho.get('within_answer_median'), 3)}</b>.{example}",
    )


def selection_section(summary: Json, methods: tuple[str, str]) -> str:
    cov = summary.get("gradient_coverage", {})
    items = "".join(
        f"<li>{escape(m)} keeps <b>{fmt(100 * cov[m], 3)}%</b> of the total γ.</li>"
        for m in dict.fromkeys(methods)
        if cov.get(m) is not None
    )
    return _section(
        "6. Top-k selection and gradient coverage",
        "k = ⌈ratio · N⌉,   coverage(m) = Σ_selected γ / Σ_all γ",
        "Each method scores every token and keeps the k highest. Coverage says how much of the "
        "update's gradient mass at the logits the kept tokens carry.",
        f"N = {summary.get('num_tokens')}, ratio = {summary.get('ratio')}, k = "
        f"<b>{summary.get('k')}</b><ul>{items}</ul>",
    )


def family_section(summary: Json) -> str:
    """Every selection criterion: its paper, formula, and what it keeps of this batch's γ."""
    cov = summary.get("gradient_coverage", {})
    header = ("method", "criterion", "paper", "formula, constants, choices", "γ kept")
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td data-label="{escape(h)}">{v}</td>'
            for h, v in zip(
                header,
                (
                    f"<code>{escape(m.name)}</code>",
                    escape(m.description),
                    escape(m.citation),
                    escape(m.details),
                    "—" if cov.get(m.name) is None else fmt(100 * cov[m.name], 3) + "%",
                ),
                strict=True,
            )
        )
        + "</tr>"
        for m in list_method_infos()
    )
    # a table on a wide screen; on a phone one card per method, each value under its column's
    # name (data-label, static/gmts.css), so nothing scrolls sideways
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    table = (
        f'<table class="learn-family"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    )

    return _section(
        "7. The family: token criteria of the RLVR literature",
        "score_t = f(H_t, log p_t, A_i, w_i, …);   keep the top k",
        "Each criterion is a score per token; a weighting (GTPO, TR-GRPO) is scored by its "
        "weight. Clip-Cov and KL-Cov single out tokens their papers detach or penalize rather "
        "than train on. The last column is the share of this batch's γ each selection keeps "
        "(methods not analyzed show —).",
        table,
    )


def predict_section(result: Json, methods: tuple[str, str], group_index: int) -> str:
    """Predict, then reveal on this group: Explore's token view and bar (app.ui.predict and
    static/gmts.js, the one implementation), opened with the picks hidden; revealed, the score
    names each token's reason, and the "why they differ" view below the tokens is shown."""
    a, b = (escape(m) for m in methods)
    tokens = render_result(result, methods, "entropy", group_index)
    reasons = why_differ_html(result, methods, element_id="learn-why-differ")
    return (
        '<section class="learn-predict"><h3>Your turn: predict, then reveal</h3>'
        f'<p class="learn-words">The picks of {a} and {b} are hidden. Click the tokens you think '
        f"{b} (or, chosen in the bar, {a}) keeps in this group: the shade is each token's "
        "entropy, the header of each answer its reward and advantage. Then press Reveal for "
        "your score, the picks you missed, and why the two methods part on each.</p>"
        f"{with_predict_bar(tokens, methods, predicting=True, reasons=reasons)}</section>"
    )


def learn_html(result: Json | None, methods: tuple[str, str], group_index: int = 0) -> str:
    """The whole Learn tab for the current result (or an invitation to analyze first)."""
    if not result:
        return (
            '<div class="learn placeholder">Analyze a group in the Explore tab: this page then '
            "explains each formula with that group's own numbers.</div>"
        )
    groups = groups_of(result)
    group = groups[min(max(group_index, 0), len(groups) - 1)]
    settings: dict[str, Any] = result.get("settings") or {}
    summary = result.get("summary") or {}
    return (
        lesson_html(group, summary, methods, groups)
        + predict_section(result, methods, group_index)
        + '<div class="learn">'
        + advantage_section(group, settings.get("advantage", ANALYSIS_DEFAULTS.advantage))
        + weight_section(
            group, settings.get("loss_aggregation", ANALYSIS_DEFAULTS.loss_aggregation)
        )
        + gradient_section(group, float(settings.get("temperature", ANALYSIS_DEFAULTS.temperature)))
        + gini_section(summary)
        + misrank_section(group, summary, methods)
        + selection_section(summary, methods)
        + family_section(summary)
        + "</div>"
    )
