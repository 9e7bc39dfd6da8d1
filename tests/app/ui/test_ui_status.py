"""The UI's progress lines (app.ui.status): the queue said in words, and each job's stages."""

from __future__ import annotations

from app.ui import status


class Busy:
    def job_load(self) -> tuple[int, int]:
        return (1, 2)


def test_queue_is_said_in_words() -> None:
    assert status.queue_text(None) == "" and status.queue_text((0, 0)) == ""
    assert status.queue_text((1, 2)).startswith("waiting in the queue: 3 jobs ahead of yours")
    assert "1 job ahead" in status.queue_text((1, 0))
    assert status.job_load(Busy()) == (1, 2) and status.job_load(object()) is None


def test_stages_are_named() -> None:
    text = status.analyze_text((1, 0), 8)
    assert text.startswith("waiting in the queue")
    assert "sampling 8 answers, one forward pass" in text
    assert status.analyze_text(None, None) == "one forward pass, scoring every token"
    knobs = {"prompts_per_step": 16, "group_size": 8, "inner_steps": 2}
    line = status.step_text(None, 2, 20, knobs)
    assert line == "step 3 of 20: sampling 16×8 answers, rewards and selection, 2 updates"


def test_live_status_says_the_place_then_each_stage() -> None:
    lines: list[tuple[str, float | None]] = []
    live = status.LiveStatus(lambda text, done: lines.append((text, done)), "step 2 of 5: ")
    live.position(2)
    live.position(1)
    live.position(0)
    live.stage("generating answers", 0, 4)
    live.stage("selection", 3, 4)
    assert lines == [
        ("step 2 of 5: waiting: 2nd in the queue", None),
        ("step 2 of 5: waiting: 1st in the queue", None),
        ("step 2 of 5: running", None),
        ("step 2 of 5: generating answers (1 of 4)", 0.0),
        ("step 2 of 5: selection (4 of 4)", 0.75),
    ]
    assert [status.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "111th",
    ]  # fmt: skip


def test_the_place_in_line_comes_with_the_estimated_wait() -> None:
    lines: list[tuple[str, float | None]] = []
    live = status.LiveStatus(lambda text, done: lines.append((text, done)))
    live.position(3, 40.0)
    live.position(2, 200.0)
    live.position(1, None)  # no job finished yet: nothing to estimate from
    assert [t for t, _ in lines] == [
        "waiting: 3rd in the queue, about 40 s to go",
        "waiting: 2nd in the queue, about 3 min to go",
        "waiting: 1st in the queue",
    ]
    assert status.wait_text(None) == "" and status.wait_text(0.2) == "1 s"
