"""The knobs of a comparison of selection methods (:class:`CompareConfig`, run by
:mod:`gmts_core.experiments.compare`): which methods, how many steps and seeds, the held-out
evaluation, the task mix and the GRPO recipe of every run.

Torch-free like :mod:`gmts_core.config`, so ``gmts compare --help`` reads its knobs without the
model stack; a module of its own because the task mixes it names sit above the GRPO layers that
import :mod:`gmts_core.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gmts_core.base_config import PolicySettings
from gmts_core.config import DEMO_RECIPE, RLConfig, registered_methods
from gmts_core.errors import InvalidInputError
from gmts_core.knobs import DEFAULT_RATIO, knob, knob_factory
from gmts_core.tasks.mixes import DEFAULT_TASK_MIX, TASK_MIXES, task_mix_names

DEFAULT_COMPARE_METHODS = ("all", "entropy", "gmts", "gmts_entropy", "random")
# The demo recipe at half the batch and half the updates: 10 runs of 20 steps fit in about
# 10 minutes on 2 CPU cores, and every method but `random` still learns visibly.
COMPARE_RECIPE = replace(DEMO_RECIPE, prompts_per_step=32, inner_steps=2)


@dataclass(frozen=True)
class CompareConfig:
    """What to compare and how long (defaults: about 10 minutes on 2 CPU cores)."""

    methods: tuple[str, ...] = knob(
        DEFAULT_COMPARE_METHODS, "Selection methods trained side by side."
    )
    ratio: float = knob(DEFAULT_RATIO, "Share of answer tokens each method trains on.", gt=0, le=1)
    steps: int = knob(20, "GRPO steps per run.", ge=1, le=10_000)
    seeds: int = knob(
        2,
        "Runs per method (training seeds seed_offset, seed_offset + 1, ...: same start and "
        "batches for every method); at least 2 for a verdict.",
        ge=1,
        le=100,
    )
    seed_offset: int = knob(
        0, "First training seed (another offset: other batches, other runs).", ge=0, le=10**9
    )
    eval_every: int = knob(10, "Evaluate held-out accuracy every this many steps.", ge=1)
    eval_problems: int = knob(200, "Held-out problems per evaluation.", ge=1, le=100_000)
    eval_samples: int = knob(1, "Answers per held-out problem.", ge=1, le=64)
    eval_temperature: float = knob(1.0, "Temperature of the evaluation (0: greedy).", ge=0, le=10)
    eval_seed: int = knob(
        10_000,
        "Sampling seed of the held-out evaluations: step n samples with eval_seed + n, the same "
        "for every method and seed (common random numbers).",
        ge=0,
        le=10**9,
    )
    task_mix: str = knob(
        DEFAULT_TASK_MIX,
        f"Training prompts of the demo task: {' | '.join(task_mix_names())} (hard-mix: half "
        "are three-digit sums beyond the demo model, zero-signal groups). Held-out problems "
        "stay two-digit.",
    )
    rl: RLConfig = knob(
        COMPARE_RECIPE, "The GRPO recipe of every run (its method and ratio are set per run)."
    )
    policy: PolicySettings = knob_factory(
        lambda: PolicySettings(kind="full"), "How each run's trainable copy is made."
    )

    def validate(self) -> None:
        if not self.methods:
            raise InvalidInputError("give at least one method to compare")
        if len(set(self.methods)) != len(self.methods):
            raise InvalidInputError(f"a method is listed twice: {', '.join(self.methods)}")
        for m in self.methods:
            if m not in registered_methods():
                raise InvalidInputError(
                    f"unknown selection method {m!r}; valid: {', '.join(registered_methods())}"
                )
        if self.task_mix not in TASK_MIXES:
            raise InvalidInputError(
                f"unknown task mix {self.task_mix!r}; valid: {', '.join(task_mix_names())}"
            )
        if self.steps < 1 or self.seeds < 1 or self.eval_every < 1 or self.eval_problems < 1:
            raise InvalidInputError("steps, seeds, eval_every and eval_problems must be >= 1")
        self.run_config(self.methods[0]).validate()

    def run_config(self, method: str) -> RLConfig:
        report = tuple(dict.fromkeys(("entropy", "gmts", *self.rl.report_methods)))
        return replace(self.rl, method=method, ratio=self.ratio, report_methods=report)

    def eval_steps(self) -> list[int]:
        points = {0, self.steps, *range(self.eval_every, self.steps, self.eval_every)}
        return sorted(points)
