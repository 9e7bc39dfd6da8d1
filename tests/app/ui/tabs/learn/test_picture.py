"""Learn's "RLVR in one picture": the group's own numbers as styled HTML (no SVG, no script)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from app.ui.tabs.learn import learn
from app.ui.tabs.learn.picture import RIGHT, WRONG, rlvr_picture


def _group(rewards: list[float], advantages: list[float], prompt: str = "Q: 2+2=?") -> dict:
    answers = [
        {"index": i, "reward": r, "advantage": a, "tokens": []}
        for i, (r, a) in enumerate(zip(rewards, advantages, strict=True))
    ]
    return {"prompt": prompt, "answers": answers}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def test_one_box_per_answer_and_a_bar_by_the_advantage_sign() -> None:
    html = rlvr_picture(_group([1, 0, 1, 0], [0.87, -0.87, 0.87, -0.87]))
    tags = _tags(html)
    assert {t for t, _ in tags} <= {"div", "span"}  # no svg, script or image
    boxes = [a for t, a in tags if a.get("class") == "rp-answer" and a.get("style")]
    assert [a["style"] for a in boxes] == [f"border-color:{c}" for c in (RIGHT, WRONG) * 2]
    bars = [a["class"] for t, a in tags if (a.get("class") or "").startswith("rp-bar")]
    assert bars == ["rp-bar rp-up", "rp-bar rp-down"] * 2  # pushed up: right of the axis
    assert re.findall(r"answer #(\d)", html) == ["0", "1", "2", "3"]
    assert "4 answers" in html and "pushed up" in html


def test_a_zero_signal_group_draws_no_bars_and_long_groups_are_counted() -> None:
    html = rlvr_picture(_group([1] * 12, [0.0] * 12), max_rows=8)
    assert "rp-bar" not in html and "+4 more" in html
    assert len(re.findall(r"answer #\d+", html)) == 8


def test_bar_lengths_follow_the_advantages() -> None:
    html = rlvr_picture(_group([1, 0, 0], [1.0, -0.5, -0.25]))
    widths = [float(w) for w in re.findall(r"width:([\d.]+)%", html)]
    assert widths == [50.0, 25.0, 12.5]  # half the axis for the largest |A|


def test_the_lesson_shows_the_picture_of_the_users_group(result: dict) -> None:
    html = learn.learn_html(result, ("entropy", "gmts"), group_index=0)
    step = html.split("RLVR in one picture")[1].split('<li class="lesson-step">')[0]
    assert '<div class="rlvr-picture"' in step
    n = len(result["groups"][0]["answers"])
    assert len(re.findall(r"answer #\d+", step)) == min(n, 8)
