"""The Learn tab's guided lesson for newcomers: RLVR in six short steps, each with the numbers
of the person's own group (the current analysis). Escaped HTML, no Gradio.

Steps: what RLVR does, the group and its rewards, advantages, forking tokens and the 80/20
rule, why a group with equal rewards teaches nothing (γ = 0), and what GMTS changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from app.ui.render import Json, fmt
from app.ui.tabs.learn.picture import rlvr_picture

LOW_ENTROPY = 0.1  # nats: a token the model was all but sure of


def _tokens(group: Json) -> list[tuple[Json, Json]]:
    return [(a, t) for a in group.get("answers", []) for t in a.get("tokens", [])]


def _step(n: int, title: str, words: str, live: str) -> str:
    return (
        f'<li class="lesson-step"><h4>{n}. {escape(title)}</h4><p>{escape(words)}</p>'
        f'<div class="learn-live"><span class="label">your group</span> {live}</div></li>'
    )


def is_zero_signal(group: Json) -> bool:
    """True when every answer's advantage is 0 (all rewards equal): no token has a gradient."""
    z = (group.get("summary") or {}).get("zero_signal")
    if z is not None:
        return bool(z)
    answers = group.get("answers", [])
    return bool(answers) and all((a.get("advantage") or 0) == 0 for a in answers)


def _forks(group: Json) -> str:
    toks = _tokens(group)
    if not toks:
        return "no answer tokens."
    low = sum((t.get("entropy") or 0) < LOW_ENTROPY for _, t in toks)
    top = sorted(toks, key=lambda p: -(p[1].get("entropy") or 0))[:5]
    names = ", ".join(
        f"{escape(repr(t.get('text', '')))} (#{a.get('index')}, H {fmt(t.get('entropy'), 2)})"
        for a, t in top
    )
    return (
        f"<b>{100 * low / len(toks):.0f}%</b> of its {len(toks)} tokens have entropy below "
        f"{LOW_ENTROPY} nats (the model was all but sure); the most uncertain, the candidate "
        f"forks, are {names}."
    )


def _gmts_change(group: Json, summary: Json, methods: tuple[str, str]) -> str:
    if is_zero_signal(group):
        return (
            "this group has no gradient at all, so there is nothing for GMTS to rank: every "
            "token's γ is 0. Any selection here, by any method, is budget that cannot move the "
            "model."
        )
    cov = summary.get("gradient_coverage") or {}
    parts = [
        f"{escape(m)} keeps {fmt(100 * cov[m], 3)}% of the gradient mass"
        for m in dict.fromkeys(methods)
        if cov.get(m) is not None
    ]
    rho = (summary.get("spearman_entropy_grad") or {}).get("batch")
    return "; ".join(parts) + f". Spearman(H, γ) over the group: {fmt(rho, 3)}."


def _equal_rewards(group: Json, zero: bool, batch: Sequence[Json]) -> str:
    """Step 5's live line: this group when its rewards are equal, else a group of the batch
    whose rewards are (its own numbers), else what would make one."""
    if zero:
        return "all rewards are equal: <b>no gradient here</b>."
    other = next((g for g in batch if is_zero_signal(g)), None)
    if other is None:
        return (
            "no group of this analysis has equal rewards: each has a learning signal. Give "
            "equal explicit rewards (1, 1, 1, 1) in Explore to see one that teaches nothing."
        )
    rewards = ", ".join(fmt(a.get("reward")) for a in other.get("answers", []))
    advs = ", ".join(fmt(a.get("advantage"), 3) for a in other.get("answers", []))
    return (
        f"group {other.get('index')} of this batch ({escape(repr(other.get('prompt', '')))}) "
        f"has rewards {rewards}: advantages {advs}, so <b>no gradient there</b>. This group's "
        "rewards differ: it has a learning signal."
    )


def lesson_html(
    group: Json, summary: Json, methods: tuple[str, str], batch: Sequence[Json] = ()
) -> str:
    """The six steps for ``group`` (one group of the current analysis; ``batch``: all of its
    groups, for the step on equal rewards)."""
    answers = group.get("answers", [])
    rewards = [a.get("reward") for a in answers]
    right = sum(1 for r in rewards if r is not None and r > 0)
    advs = ", ".join(f"#{a.get('index')}: {fmt(a.get('advantage'), 3)}" for a in answers)
    detail = (answers[0].get("reward_detail") or {}) if answers else {}
    rule = escape(str(detail.get("rule", "explicit")))
    zero = is_zero_signal(group)
    steps = [
        _step(1, "RLVR in one picture",
              "Reinforcement learning with verifiable rewards: the model answers a prompt "
              "several times, a rule checks each answer (no human, no reward model), and one "
              "update makes the rewarded answers more likely and the others less.",
              f"prompt {escape(repr(group.get('prompt', '')))} → {len(answers)} sampled "
              f"answers → the {rule} rule → one update.{rlvr_picture(group)}"),
        _step(2, "The group and its rewards",
              "The answers to one prompt form a group (G answers). Each gets a reward; here 1 "
              "for the right final answer and 0 otherwise.",
              f"rewards {', '.join(fmt(r) for r in rewards)}: <b>{right}</b> of "
              f"{len(answers)} rewarded."),
        _step(3, "Advantages: better or worse than the group",
              "Each reward is compared with the group's mean (and scaled by its spread): above "
              "the mean is a positive advantage (push the answer up), below is negative (push "
              "it down). Every token of an answer shares its answer's advantage.",
              f"advantages {advs}."),
        _step(4, "Forking tokens and the 80/20 rule",
              "Most tokens of an answer are near-certain; a few 'forks' (high entropy) are where "
              "the answer could go either way, and they decide the reward. The 80/20 paper "
              "trains only on the 20% highest-entropy tokens and reports doing as well as or "
              "better than training on all of them (its claim, not measured here).",
              _forks(group)),
        _step(5, "Why a group with equal rewards teaches nothing (γ = 0)",
              "If every answer gets the same reward, every advantage is 0, so every token's "
              "gradient γ = |A|·w·g is 0, however uncertain the token. Entropy still ranks "
              "those tokens high; GMTS gives them nothing.",
              _equal_rewards(group, zero, batch)),
        _step(6, "What GMTS changes",
              "GMTS ranks tokens by their gradient magnitude γ = |A|·w·g instead of entropy H: "
              "within one answer the two agree (A and w are fixed), but across answers and "
              "groups γ also counts how much the answer matters.",
              _gmts_change(group, summary, methods)),
    ]  # fmt: skip
    return (
        '<section class="lesson"><h3>New to RLVR? Six steps with your own group</h3>'
        f'<ol class="lesson-steps">{"".join(steps)}</ol></section>'
    )
