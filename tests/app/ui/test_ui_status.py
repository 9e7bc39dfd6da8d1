"""The UI's progress lines (app.ui.status): the queue said in words, and each job's stages."""

from __future__ import annotations

from app.ui import status


class Busy:
    def job_load(self) -> tuple[int, int]:
        return (1, 2)


def test_queue_is_said_in_words() -> None:
    assert status.queue_text(None) == "" and status.queue_text((0, 0)) == ""
    assert status.queue_text((1, 2)).startswith("waiting in line: 3 jobs ahead of yours")
    assert "1 job ahead" in status.queue_text((1, 0))
    assert status.job_load(Busy()) == (1, 2) and status.job_load(object()) is None


def test_stages_are_named() -> None:
    text = status.analyze_text((1, 0), 8)
    assert text.startswith("waiting in line") and "sampling 8 answers, one forward pass" in text
    assert status.analyze_text(None, None) == "one forward pass, scoring every token"
    knobs = {"prompts_per_step": 16, "group_size": 8, "inner_steps": 2}
    line = status.step_text(None, 2, 20, knobs)
    assert line == "step 3 of 20: sampling 16×8 answers, rewards and selection, 2 updates"
