"""Learn's "RLVR in one picture": an inline SVG drawn from the group's own numbers."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from app.ui.tabs.learn import learn
from app.ui.tabs.learn.picture import RIGHT, WRONG, rlvr_picture

SVG = "{http://www.w3.org/2000/svg}"


def _group(rewards: list[float], advantages: list[float], prompt: str = "Q: 2+2=?") -> dict:
    answers = [
        {"index": i, "reward": r, "advantage": a, "tokens": []}
        for i, (r, a) in enumerate(zip(rewards, advantages, strict=True))
    ]
    return {"prompt": prompt, "answers": answers}


def test_one_box_per_answer_and_a_bar_by_the_advantage_sign() -> None:
    svg = rlvr_picture(_group([1, 0, 1, 0], [0.87, -0.87, 0.87, -0.87]))
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter("text")]
    assert [t for t in texts if t and t.startswith("answer #")] == [
        f"answer #{i}" for i in range(4)
    ]
    assert "4 answers" in texts
    boxes = [r for r in root.iter("rect") if r.get("width") == "90"]
    assert [b.get("stroke") for b in boxes] == [RIGHT, WRONG, RIGHT, WRONG]
    bars = [
        r for r in root.iter("rect") if r.get("fill") in (RIGHT, WRONG) and r.get("width") != "90"
    ]
    axis = 282
    for bar, adv in zip(bars, [0.87, -0.87, 0.87, -0.87], strict=True):
        x, w = float(bar.get("x")), float(bar.get("width"))
        assert (x >= axis) == (adv > 0) and w > 0  # pushed up: right of the line
    assert root.get("role") == "img" and "pushed up" in root.get("aria-label")


def test_a_zero_signal_group_draws_no_bars_and_long_groups_are_counted() -> None:
    svg = rlvr_picture(_group([1] * 12, [0.0] * 12), max_rows=8)
    root = ET.fromstring(svg)
    bars = [r for r in root.iter("rect") if r.get("fill") in (RIGHT, WRONG)]
    assert all(float(b.get("width")) == 0 for b in bars)
    assert "+4 more" in [t.text for t in root.iter("text")]


def test_text_is_escaped() -> None:
    svg = rlvr_picture(_group([1, 0], [1, -1], prompt="<script>x</script>"))
    ET.fromstring(svg)  # well-formed
    assert "<script>" not in svg


def test_the_lesson_shows_the_picture_of_the_users_group(result: dict) -> None:
    html = learn.learn_html(result, ("entropy", "gmts"), group_index=0)
    step = html.split("RLVR in one picture")[1].split('<li class="lesson-step">')[0]
    assert '<svg class="rlvr-picture"' in step
    n = len(result["groups"][0]["answers"])
    assert len(re.findall(r">answer #\d+<", step)) == min(n, 8)
