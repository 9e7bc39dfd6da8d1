"""The disagreement spotlight: the two answers of a batch that show why two methods differ.

The first screen opens on a batch (the default example), but a token view shows one group at a
time, and the group that makes the point is rarely group 0. This module picks, by rule, from
any analysis body:

* the **wasted** pick: the zero-signal group (every answer got the same reward, so every
  advantage is 0 and no token there has a gradient) where one of the two methods spends the
  largest share of its picks, and that group's answer it picks most from;
* the **signal** pick: the answer with the largest |advantage| that holds tokens one method
  selects and the other does not, with how sure the model was of those tokens.

Each comes with one plain sentence built from those numbers only (no fixed text about a
particular batch), and the answer's tokens as the token view draws them. Gradio-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from app.palette import css_vars
from app.ui.render import Json, groups_of, rank_pool, render_answer, score_range

QUESTION_CHARS = 40  # a prompt is quoted by its first line, cut to this length


@dataclass(frozen=True)
class WastedPick:
    """A zero-signal group where ``method`` spends ``share`` of its picks."""

    group: int  # position in the body's groups
    answer: int  # position of the answer it picks most from
    method: str
    other: str
    picks: int  # ``method``'s selected tokens in the group
    share: float  # picks / ``method``'s selected tokens in the batch
    other_share: float  # the same for ``other``
    num_answers: int
    reward: float  # the reward every answer of the group got
    sentence: str


@dataclass(frozen=True)
class SignalPick:
    """An answer with a large |advantage| where ``method`` selects tokens ``other`` skips."""

    group: int
    answer: int
    method: str
    other: str
    advantage: float
    only: int  # tokens ``method`` selects there and ``other`` does not
    min_prob: float  # the least probability the model gave one of those tokens
    sentence: str


def question(prompt: str) -> str:
    """``"Q: 83-65=?\\nA:"`` -> ``"83-65"``: the prompt's first line, without a ``Q:`` label
    and a trailing ``=?``, cut to :data:`QUESTION_CHARS`."""
    lines = [ln for ln in str(prompt).strip().splitlines() if ln.strip()]
    q = lines[0].strip() if lines else ""
    q = q.removeprefix("Q:").strip().removesuffix("?").strip().removesuffix("=").strip()
    if len(q) > QUESTION_CHARS:
        q = q[: QUESTION_CHARS - 1].rstrip() + "…"
    return q or "this prompt"


def _selected(tok: Json, m: str) -> bool:
    return bool((tok.get("selected") or {}).get(m))


def _picks(answers: list[Json], m: str) -> int:
    return sum(_selected(t, m) for a in answers for t in a.get("tokens", []))


def _is_zero_signal(group: Json) -> bool:
    flag = (group.get("summary") or {}).get("zero_signal")
    if flag is not None:
        return bool(flag)
    answers = group.get("answers") or []
    return bool(answers) and all((a.get("advantage") or 0) == 0 for a in answers)


def _reward_words(reward: float, n: int) -> str:
    if reward == 1:
        return f"all {n} answers to {{q}} were right"
    if reward == 0:
        return f"all {n} answers to {{q}} were wrong"
    return f"all {n} answers to {{q}} got the same reward, {reward:g}"


def wasted_pick(result: Json | None, methods: tuple[str, str]) -> WastedPick | None:
    """The zero-signal group where one of ``methods`` spends the largest share of its picks
    (None when no method spends any pick in a zero-signal group)."""
    groups = groups_of(result) if result else []
    totals = {m: sum(_picks(g.get("answers") or [], m) for g in groups) for m in methods}
    best: tuple[float, int, str] | None = None
    for gi, g in enumerate(groups):
        if not _is_zero_signal(g):
            continue
        for m in dict.fromkeys(methods):
            n = _picks(g.get("answers") or [], m)
            if n and totals[m] and (best is None or n / totals[m] > best[0]):
                best = (n / totals[m], gi, m)
    if best is None:
        return None
    share, gi, m = best
    other = methods[1] if m == methods[0] else methods[0]
    answers = groups[gi]["answers"]
    ai = max(range(len(answers)), key=lambda i: _picks([answers[i]], m))
    other_share = _picks(answers, other) / totals[other] if totals.get(other) else 0.0
    reward = float(answers[0].get("reward") or 0.0)
    q = question(groups[gi].get("prompt", ""))
    lead = _reward_words(reward, len(answers)).format(q=q)
    sentence = (
        f"{lead[0].upper()}{lead[1:]}, so nothing can be learned from them (every advantage "
        f"is 0), yet {m} spends {share:.0%} of its picks here; {other} spends "
        f"{other_share:.0%}."
    )
    return WastedPick(
        gi, ai, m, other, _picks(answers, m), share, other_share, len(answers), reward, sentence
    )


def _only(answer: Json, m: str, other: str) -> list[Json]:
    return [t for t in answer.get("tokens", []) if _selected(t, m) and not _selected(t, other)]


def _standing(answer: Json, answers: list[Json]) -> str:
    """How the answer's reward stands in its group, in words."""
    r = float(answer.get("reward") or 0.0)
    rewards = [float(a.get("reward") or 0.0) for a in answers]
    n, same = len(rewards), sum(x == r for x in rewards)
    if set(rewards) <= {0.0, 1.0}:
        verdict, rest = ("right", "wrong") if r == 1 else ("wrong", "right")
        if same == 1:
            return f"was the only {verdict} one of {n}"
        return f"was {verdict} while {n - same} of the {n} were {rest}"
    mean = sum(rewards) / n
    return f"got reward {r:g} against the group's mean {mean:.2f}"


def signal_pick(result: Json | None, methods: tuple[str, str]) -> SignalPick | None:
    """The answer with the largest |advantage| holding tokens one of ``methods`` selects and
    the other does not (``methods[1]`` first: the method the view calls B); None if none."""
    groups = groups_of(result) if result else []
    best: tuple[float, int, int, int, str] | None = None
    for m, other in ((methods[1], methods[0]), (methods[0], methods[1])):
        for gi, g in enumerate(groups):
            if _is_zero_signal(g):
                continue
            for ai, a in enumerate(g.get("answers") or []):
                n = len(_only(a, m, other))
                key = (abs(float(a.get("advantage") or 0.0)), n)
                if n and (best is None or key > (best[0], best[3])):
                    best = (key[0], gi, ai, n, m)
        if best is not None:
            break
    if best is None:
        return None
    _, gi, ai, n, m = best
    other = methods[1] if m == methods[0] else methods[0]
    answers = groups[gi]["answers"]
    answer = answers[ai]
    adv = float(answer.get("advantage") or 0.0)
    probs = [float(t.get("prob") or 0.0) for t in _only(answer, m, other)]
    low = min(probs)
    sure = "the model was sure of them" if low >= 0.5 else "the model gave them"
    sentence = (
        f"Answer #{int(answer.get('index', ai))} to {question(groups[gi].get('prompt', ''))} "
        f"{_standing(answer, answers)}: a strong learning signal (advantage {adv:+.2f}). "
        f"{m} picks {n} of its tokens that {other} skips: {sure} (probability {low:.2f} or "
        "more), so their entropy is low."
    )
    return SignalPick(gi, ai, m, other, adv, n, low, sentence)


def _answer_view(result: Json, group: Json, ai: int, methods: tuple[str, str], zero: bool) -> str:
    """One answer drawn as the token view draws it (marks, shade by entropy, tooltips whose
    ranks name the pool the result's scope ranks over)."""
    answers = group.get("answers") or []
    tokens = [t for a in answers for t in a.get("tokens", [])]
    lo, hi = score_range(tokens, "entropy")
    pool = rank_pool(result, group)
    body = render_answer(answers[ai], methods, "entropy", lo, hi, pool, zero)
    return (
        f'<div class="gmts-view spot-tokens" data-group="{int(group.get("index", 0))}" '
        f'style="{css_vars(*methods)}">{body}</div>'
    )


def _card(kind: str, title: str, sentence: str, tokens: str) -> str:
    return (
        f'<div class="spot-card spot-{kind}"><h4>{escape(title)}</h4>'
        f'<p class="spot-sentence">{escape(sentence)}</p>{tokens}</div>'
    )


def spotlight_html(result: Json | None, methods: tuple[str, str]) -> str:
    """The two cards (empty string when the result has neither pick)."""
    if not result or methods[0] == methods[1]:
        return ""
    groups = groups_of(result)
    cards: list[str] = []
    w = wasted_pick(result, methods)
    if w is not None:
        title = f"Group {w.group}: nothing to learn, yet {w.method} picks here"
        view = _answer_view(result, groups[w.group], w.answer, methods, True)
        cards.append(_card("wasted", title, w.sentence, view))
    s = signal_pick(result, methods)
    if s is not None:
        title = f"Group {s.group}: a strong signal, picked by {s.method}"
        view = _answer_view(result, groups[s.group], s.answer, methods, False)
        cards.append(_card("signal", title, s.sentence, view))
    if not cards:
        return ""
    return f'<section class="spotlight" id="spotlight">{"".join(cards)}</section>'
