"""Live-RL sessions: a private trainable policy, its optimizer and its step history.

A :class:`Session` owns a :class:`~gmts_core.grpo.policy.TrainablePolicy` (the base model is never
touched), its AdamW state, default RL settings and the history of its steps. Step ``n`` of a
session always uses the seed ``(session seed, n)``, so after ``reset()`` the same steps
replay exactly. Keeping many sessions (time-to-live, eviction, one caller at a time) is a
server concern: ``app.services.session_store``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gmts_core.config import RLConfig
from gmts_core.experiments.evaluation import (
    TASK_BATCHES,
    TASK_REWARDS,
    EvalResult,
    evaluate_accuracy,
)
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.grpo.records import StepMetrics, StepResult
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.grpo.step import grpo_step
from gmts_core.grpo.update import make_optimizer
from gmts_core.progress import StageCallback, checkpoint

logger = logging.getLogger(__name__)


def step_seed(session_seed: int, step: int) -> int:
    """The seed of a session's step ``step`` (sampling, demo batch, random selection)."""
    return session_seed * 1_000_003 + step


@dataclass(frozen=True)
class SessionEvaluation:
    """A held-out evaluation of a session's policy, after ``step`` steps."""

    step: int
    result: EvalResult


@dataclass
class Session:
    """One user's private policy, optimizer, settings and step history."""

    id: str
    policy: TrainablePolicy
    config: RLConfig
    seed: int = 0
    created_at: float = 0.0
    last_used: float = 0.0
    history: list[StepMetrics] = field(default_factory=list)
    evaluations: list[SessionEvaluation] = field(default_factory=list)
    last_result: StepResult | None = None
    # the task its steps draw batches from when given no prompts, and its held-out problems:
    # arith (the demo model's), word_arith (the real model's: gmts_core.model.packaged)
    task: str = "arith"
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # while a step with a ``progress`` callback (the server's save) runs: the history entries
    # that callback has heard, the only ones :attr:`shown_history` gives; None: all of them
    heard_steps: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.config.validate()
        self.optimizer = make_optimizer(self.policy, self.config)

    @property
    def steps_done(self) -> int:
        return len(self.history)

    @property
    def shown_history(self) -> list[StepMetrics]:
        """The history a reader may see while a step runs: a step is shown once ``progress``
        (a server saves the session there) has heard it, so no client sees a step that a crash
        before its save would lose."""
        heard = self.heard_steps
        return self.history[: len(self.history) if heard is None else heard]

    def memory_bytes(self) -> int:
        """What this session holds: its trainable weights, their start copy (for reset), their
        gradients and AdamW's two moments, i.e. 5 x the trainable parameters' bytes. A full
        copy of the 0.17M-parameter demo model is about 3.4 MB; a LoRA adapter counts only
        its adapter weights (the base model is shared)."""
        per_copy = sum(p.numel() * p.element_size() for p in self.policy.trainable_parameters())
        return 5 * per_copy

    def step(
        self,
        prompts: Sequence[RLPrompt] | None = None,
        num_steps: int = 1,
        config: RLConfig | None = None,
        progress: Callable[[int, StepResult], None] | None = None,
        on_stage: StageCallback | None = None,
    ) -> list[StepResult]:
        """Run ``num_steps`` GRPO steps; without ``prompts`` each draws a batch of its task.
        ``progress(done, result)`` hears each finished step, ``on_stage`` each step's stages
        (:func:`gmts_core.grpo.step.grpo_step`).

        A server holding many sessions takes ``lock`` around it. ``config`` overrides the
        session's settings for these steps only.
        """
        cfg = config or self.config
        cfg.validate()
        results: list[StepResult] = []
        if progress is not None:
            self.heard_steps = len(self.history)
        try:
            for _ in range(num_steps):
                checkpoint()  # a cancelled job stops between steps
                n = self.steps_done
                seed = step_seed(self.seed, n)
                draw = TASK_BATCHES[self.task]
                batch = list(prompts) if prompts else draw(cfg.prompts_per_step, seed, "train")
                result = grpo_step(
                    self.policy, self.optimizer, batch, cfg, seed, step=n + 1, on_stage=on_stage
                )
                self.history.append(result.metrics)
                self.last_result = result
                results.append(result)
                if progress is not None:
                    progress(len(results), result)
                    self.heard_steps = len(self.history)
        finally:
            self.heard_steps = None
        return results

    def evaluate(self, num_problems: int = 200, **kwargs: Any) -> EvalResult:
        """Held-out accuracy of the policy now; recorded with the current step number."""
        kwargs.setdefault("temperature", self.config.temperature)
        kwargs.setdefault("max_new_tokens", self.config.max_new_tokens)
        kwargs.setdefault("reward_kind", TASK_REWARDS[self.task])
        kwargs.setdefault("chat_template", self.config.chat_template)
        problems = TASK_BATCHES[self.task](num_problems, 0, "heldout")
        result = evaluate_accuracy(self.policy.model, self.policy.tokenizer, problems, **kwargs)
        self.evaluations.append(SessionEvaluation(self.steps_done, result))
        return result

    def reset(self) -> None:
        """Back to the start: weights bit-identical, fresh optimizer, empty history."""
        self.policy.reset()
        self.optimizer = make_optimizer(self.policy, self.config)
        self.history.clear()
        self.evaluations.clear()
        self.last_result = None
