"""Stage announcements: long computations say which stage they are in, as it starts.

:func:`gmts_core.analysis.analyze.analyze` and :func:`gmts_core.grpo.step.grpo_step` take an
``on_stage`` callable, ``on_stage(name, done, total)``: called when a stage begins, with its name
(e.g. "generating answers"), the number of stages already finished and the number of stages in the
job. It runs on the computing thread, between stages, so it should return quickly (a UI updates a
progress line; a CLI prints). The default is a no-op. Every announcement is also a cancellation
checkpoint (:func:`gmts_core.cancel.checkpoint`): a cancelled job stops there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gmts_core.cancel import checkpoint

StageCallback = Callable[[str, int, int], None]  # (stage name, stages done, stages in all)

# stage names, shared by the analysis and the RL step so front ends can explain them
GENERATING = "generating answers"
TOKENIZING = "tokenizing answers"
REWARDS = "scoring rewards"
STATISTICS = "token statistics"
SELECTION = "selection"
UPDATE = "update"
LOGPROB_AFTER = "log-prob after"


def no_stage(name: str, done: int, total: int) -> None:
    """The default ``on_stage``: nobody listens."""


@dataclass
class Stages:
    """Announces a job's stages in order: ``begin(name)`` reports (name, done, total) and counts
    the stage; ``total`` may grow when a later part of the job learns it has more stages."""

    on_stage: StageCallback = no_stage
    total: int = 0
    done: int = 0

    def begin(self, name: str) -> None:
        checkpoint()
        self.total = max(self.total, self.done + 1)
        self.on_stage(name, self.done, self.total)
        self.done += 1


def stages(on_stage: StageCallback | None, total: int) -> Stages:
    """A :class:`Stages` for ``on_stage`` (None: the no-op) and ``total`` stages."""
    return Stages(on_stage or no_stage, total)
