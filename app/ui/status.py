"""What the UI says while a job waits or runs: one place for every progress message.

The server runs heavy jobs one (or a few) at a time (``GMTS_MAX_CONCURRENT_JOBS``); a person's
Analyze or training step may wait behind another tab's job. These messages say so instead of a
bare timer: the queue as it stood when the job was sent, then (:class:`LiveStatus`, either
backend: the remote one polls the server's ``GET /v1/queue/{request_id}``) the job's place in
the queue as it changes, with the estimated wait ("waiting: 2nd in the queue, about 40 s to
go", "1st in the queue") and the stage being run as the library announces it ("generating
answers (1 of 4)"). Pure: no Gradio.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Show = Callable[[str, float | None], None]  # (text, fraction done or None) -> the progress line


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def wait_text(seconds: float | None) -> str:
    """An estimated wait for people: "40 s", "3 min" ('' when unknown)."""
    if seconds is None:
        return ""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"


@dataclass
class LiveStatus:
    """Says where a job is, as it changes: its place in the queue while it waits (``position``,
    fed by the job queue), then each stage as it begins (``stage``, fed by the library's
    ``on_stage``). ``prefix`` leads every line (e.g. "step 3 of 20: ")."""

    show: Show
    prefix: str = ""

    def position(self, place: int, estimated_wait_s: float | None = None) -> None:
        if place > 0:
            about = f", about {wait_text(estimated_wait_s)} to go" if estimated_wait_s else ""
            self.show(f"{self.prefix}waiting: {ordinal(place)} in the queue{about}", None)
        else:
            self.show(f"{self.prefix}running", None)

    def stage(self, name: str, done: int, total: int) -> None:
        self.show(f"{self.prefix}{name} ({done + 1} of {total})", done / max(total, 1))


def on_progress(progress: Callable[..., Any], prefix: str = "") -> LiveStatus:
    """A :class:`LiveStatus` that says each line on a Gradio-like ``progress(done, desc=...)``
    (the overlay of the running event). Waiting lines go out at 0 done: Gradio's overlay
    shows no text for a progress of None."""
    return LiveStatus(lambda text, done: progress(done or 0.0, desc=text), prefix)


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
        f"waiting in the queue: {ahead} job{'s' if ahead != 1 else ''} ahead of yours "
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
