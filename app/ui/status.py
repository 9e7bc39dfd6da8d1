"""What the UI says while a job waits or runs: one place for every progress message.

The server runs heavy jobs one (or a few) at a time (``GMTS_MAX_CONCURRENT_JOBS``); a person's
Analyze or training step may wait behind another tab's job. These messages say so, with the
queue as it stood when the job was sent, and name the stages the job goes through, instead of a
bare timer. Pure: no Gradio.
"""

from __future__ import annotations

from typing import Any


def job_load(backend: Any) -> tuple[int, int] | None:
    """(running, waiting) heavy jobs on the local server now; None when it cannot be known."""
    load = getattr(backend, "job_load", None)
    return load() if callable(load) else None


def queue_text(load: tuple[int, int] | None) -> str:
    """A short phrase about the queue, or '' when nothing is ahead."""
    if not load:
        return ""
    running, waiting = load
    if running == 0 and waiting == 0:
        return ""
    ahead = running + waiting
    return (
        f"waiting in line: {ahead} job{'s' if ahead != 1 else ''} ahead of yours "
        f"({running} running, {waiting} waiting) — "
    )


def analyze_text(load: tuple[int, int] | None, num_answers: int | None) -> str:
    """The progress line of an Analyze: the queue, then what the job does."""
    sample = f"sampling {num_answers} answers, " if num_answers else ""
    return f"{queue_text(load)}{sample}one forward pass, scoring every token"


def step_text(load: tuple[int, int] | None, i: int, total: int, knobs: dict[str, Any]) -> str:
    """The progress line of training step ``i`` (0-based) of ``total``."""
    prompts, g = knobs.get("prompts_per_step"), knobs.get("group_size")
    updates = knobs.get("inner_steps", 1)
    return (
        f"{queue_text(load)}step {i + 1} of {total}: sampling {prompts}×{g} answers, "
        f"rewards and selection, {updates} update{'s' if updates != 1 else ''}"
    )
