"""The spotlight's picks and sentences: on the shipped default example, and as properties on batches
nobody picked (the default example's answers with rewards and selections redrawn at random)."""

from __future__ import annotations

import copy
import random
import re
from typing import Any

import pytest

from app.services.default_example import load_default_example
from app.ui.tabs.explore import spotlight
from app.ui.tabs.explore.tab import initial_values

PAIR = ("entropy", "gmts")


def _default_example() -> dict[str, Any]:
    body = load_default_example()
    assert body is not None
    return body


def _redrawn(seed: int) -> dict[str, Any]:
    """The default example with each answer's reward redrawn (0/1, or a fraction), advantages and
    zero-signal flags recomputed from them, and each method's selection redrawn."""
    rng = random.Random(seed)
    body = copy.deepcopy(_default_example())
    graded = rng.random() < 0.3  # rewards in [0, 1] instead of right/wrong
    flat = rng.randrange(len(body["groups"])) if rng.random() < 0.6 else -1
    for gi, g in enumerate(body["groups"]):
        answers = g["answers"]
        for a in answers:
            a["reward"] = round(rng.random(), 2) if graded else float(rng.random() < 0.5)
        if gi == flat:  # one group whose answers all got the same reward
            same = rng.choice([0.0, 1.0, round(rng.random(), 2)])
            for a in answers:
                a["reward"] = same
        rewards = [a["reward"] for a in answers]
        mean = sum(rewards) / len(rewards)
        sd = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        for a in answers:
            a["advantage"] = 0.0 if sd == 0 else (a["reward"] - mean) / sd
            for t in a["tokens"]:
                t["selected"] = {m: rng.random() < 0.2 for m in PAIR}
                t["prob"] = rng.random()
        g["summary"]["zero_signal"] = sd == 0
    return body


def _picks(group: dict[str, Any], m: str) -> int:
    return sum(t["selected"][m] for a in group["answers"] for t in a["tokens"])


def test_default_example_spotlights_the_zero_signal_group_and_a_gmts_only_answer() -> None:
    body = _default_example()
    w = spotlight.wasted_pick(body, PAIR)
    assert w is not None and w.method == "entropy"
    assert body["groups"][w.group]["summary"]["zero_signal"]
    # the share is the one the analysis reports as entropy's budget in that group
    assert w.share == pytest.approx(body["summary"]["budget_share"]["entropy"][w.group])
    assert f"{w.share:.0%} of its picks" in w.sentence and "were wrong" in w.sentence
    s = spotlight.signal_pick(body, PAIR)
    assert s is not None and s.method == "gmts" and s.only >= 1
    html = initial_values(body)[12]
    assert html.count('class="spot-card') == 2
    assert "tok-wasted" in html and "sel-a" in html and re.search(r'class="tok[^"]*sel-b', html)


@pytest.mark.parametrize("seed", range(40))
def test_wasted_sentence_states_what_the_group_shows(seed: int) -> None:
    body = _redrawn(seed)
    w = spotlight.wasted_pick(body, PAIR)
    zero = [i for i, g in enumerate(body["groups"]) if g["summary"]["zero_signal"]]
    totals = {m: sum(_picks(g, m) for g in body["groups"]) for m in PAIR}
    shares = {
        (i, m): _picks(body["groups"][i], m) / totals[m] for i in zero for m in PAIR if totals[m]
    }
    if not any(shares.values()):
        assert w is None  # no zero-signal pick: nothing is claimed
        return
    assert w is not None
    group = body["groups"][w.group]
    assert w.group in zero and all(a["advantage"] == 0 for a in group["answers"])
    assert w.share == pytest.approx(max(shares.values()))  # the largest share, of its method
    assert w.share == pytest.approx(shares[(w.group, w.method)])
    rewards = {a["reward"] for a in group["answers"]}
    assert rewards == {w.reward}  # "all answers got the same reward" holds
    word = {1.0: "were right", 0.0: "were wrong"}.get(w.reward, f"same reward, {w.reward:g}")
    assert word in w.sentence
    assert f"all {len(group['answers'])} answers" in w.sentence.lower()
    assert f"{w.method} spends {w.share:.0%}" in w.sentence
    assert f"{w.other} spends {w.other_share:.0%}" in w.sentence
    picked = _picks({"answers": [group["answers"][w.answer]]}, w.method)
    assert picked == max(_picks({"answers": [a]}, w.method) for a in group["answers"])


@pytest.mark.parametrize("seed", range(40))
def test_signal_sentence_states_what_the_answer_shows(seed: int) -> None:
    body = _redrawn(seed)
    s = spotlight.signal_pick(body, PAIR)
    if s is None:
        return
    group = body["groups"][s.group]
    assert not group["summary"]["zero_signal"]
    answer = group["answers"][s.answer]
    only = [t for t in answer["tokens"] if t["selected"][s.method] and not t["selected"][s.other]]
    assert s.only == len(only) >= 1
    assert s.advantage == pytest.approx(answer["advantage"])
    # no other answer with such picks (by the same method) has a larger |advantage|
    for g in body["groups"]:
        if g["summary"]["zero_signal"]:
            continue
        for a in g["answers"]:
            if any(t["selected"][s.method] and not t["selected"][s.other] for t in a["tokens"]):
                assert abs(a["advantage"]) <= abs(s.advantage) + 1e-12
    assert s.min_prob == pytest.approx(min(t["prob"] for t in only))
    assert f"{s.method} picks {s.only} of its tokens that {s.other} skips" in s.sentence
    assert f"probability {s.min_prob:.2f} or more" in s.sentence
    assert ("was sure" in s.sentence) == (s.min_prob >= 0.5)  # "sure" only when it was
    rewards = [a["reward"] for a in group["answers"]]
    if set(rewards) <= {0.0, 1.0}:
        verdict = "right" if answer["reward"] == 1 else "wrong"
        assert verdict in s.sentence
        if rewards.count(answer["reward"]) == 1:
            assert f"the only {verdict} one of {len(rewards)}" in s.sentence


def test_no_batch_or_identical_methods_show_no_spotlight() -> None:
    assert spotlight.spotlight_html(None, PAIR) == ""
    assert spotlight.spotlight_html(_default_example(), ("gmts", "gmts")) == ""
    flat = _redrawn(0)
    for g in flat["groups"]:
        g["summary"]["zero_signal"] = False
        for a in g["answers"]:
            for t in a["tokens"]:
                t["selected"] = dict.fromkeys(PAIR, False)
    assert spotlight.spotlight_html(flat, PAIR) == ""


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("Q: 83-65=?\nA:", "83-65"), ("What is 2+2?", "What is 2+2"), ("", "this prompt")],
)
def test_question_quotes_the_prompt(prompt: str, expected: str) -> None:
    assert spotlight.question(prompt) == expected
