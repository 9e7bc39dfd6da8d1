"""Typed results of a GRPO step (metrics, per-token log-prob changes) and their JSON form."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from gmts_core.records import AnalysisResult

if TYPE_CHECKING:
    from gmts_core.rl import RLConfig, TrainBatch, UpdateStats


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass
class StepMetrics:
    """What one GRPO step did, in numbers (one point of every training curve)."""

    step: int
    method: str
    ratio: float
    learning_rate: float
    loss: float  # total loss (policy + beta * KL), mean over inner steps
    policy_loss: float
    kl: float  # mean k3 KL(pi || reference) per answer token, before each inner update
    grad_norm: float  # total gradient norm before clipping
    clip_low_fraction: float  # of selected tokens
    clip_high_fraction: float
    selected_fraction: float  # share of answer tokens in the training mask
    gradient_coverage: float  # share of the logit-gradient mass sum(gamma) the mask keeps
    reward_mean: float
    reward_std: float  # population std over every answer of the batch
    num_prompts: int
    num_answers: int
    num_tokens: int
    num_zero_signal_groups: int
    wasted_share: dict[str, float] = field(default_factory=dict)  # per method, see summaries
    # mean (after - before) over selected tokens; NaN (JSON null) unless measure_logprob_after
    selected_logprob_change: float = 0.0
    unselected_logprob_change: float = 0.0  # the same over the other tokens
    seconds: float = 0.0

    @classmethod
    def from_parts(
        cls,
        step: int,
        config: RLConfig,
        result: AnalysisResult,
        mask: torch.Tensor,
        update: UpdateStats,
    ) -> StepMetrics:
        s = result.summary
        rewards = [a.reward for _, a in result.iter_answers()]
        after = update.logprob_after
        delta = (
            torch.full(mask.shape, math.nan, dtype=torch.float64)  # not measured
            if after is None
            else (after - update.logprob_before).double()
        )
        return cls(
            step=step,
            method=config.method,
            ratio=config.ratio,
            learning_rate=config.learning_rate,
            loss=update.loss,
            policy_loss=update.policy_loss,
            kl=update.kl,
            grad_norm=update.grad_norm,
            clip_low_fraction=update.clip_low_fraction,
            clip_high_fraction=update.clip_high_fraction,
            selected_fraction=int(mask.sum()) / max(mask.numel(), 1),
            gradient_coverage=s["gradient_coverage"][config.method],
            reward_mean=statistics.fmean(rewards),
            reward_std=statistics.pstdev(rewards),
            num_prompts=len(result.groups),
            num_answers=len(rewards),
            num_tokens=int(mask.numel()),
            num_zero_signal_groups=s["num_zero_signal_groups"],
            wasted_share=dict(s["wasted_share"]),
            selected_logprob_change=float(delta[mask].mean()) if mask.any() else 0.0,
            unselected_logprob_change=float(delta[~mask].mean()) if (~mask).any() else 0.0,
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: (_num(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class TokenChange:
    """One answer token's log-probability before and after the step's update."""

    position: int
    id: int
    text: str
    selected: bool
    logprob_before: float
    logprob_after: float | None  # None when the step did not measure it

    def to_dict(self) -> dict[str, Any]:
        after = self.logprob_after
        return {
            "position": self.position,
            "id": self.id,
            "text": self.text,
            "selected": self.selected,
            "logprob_before": _num(self.logprob_before),
            "logprob_after": None if after is None else _num(after),
            "logprob_change": None if after is None else _num(after - self.logprob_before),
        }


@dataclass
class AnswerChange:
    """One answer of the batch: reward, advantage and its tokens' log-prob changes."""

    group: int
    index: int
    prompt: str
    text: str
    reward: float
    advantage: float
    tokens: list[TokenChange]

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "index": self.index,
            "prompt": self.prompt,
            "text": self.text,
            "reward": self.reward,
            "advantage": self.advantage,
            "tokens": [t.to_dict() for t in self.tokens],
        }


def answer_changes(
    result: AnalysisResult, mask: torch.Tensor, before: torch.Tensor, after: torch.Tensor | None
) -> list[AnswerChange]:
    """Per answer, each token's text, selection flag and log-prob before/after the update
    (after: None where not measured)."""
    sel, lp0 = mask.tolist(), before.tolist()
    lp1: list[float | None] = [None] * len(lp0) if after is None else after.tolist()
    out, flat = [], 0
    for group, ans in result.iter_answers():
        tokens = [
            TokenChange(t.position, t.id, t.text, sel[flat + j], lp0[flat + j], lp1[flat + j])
            for j, t in enumerate(ans.tokens)
        ]
        flat += ans.length
        out.append(
            AnswerChange(
                group.index, ans.index, group.prompt, ans.text, ans.reward, ans.advantage, tokens
            )
        )
    return out


@dataclass
class StepResult:
    """A step's metrics, its batch with per-token changes, and the analysis it trained on."""

    metrics: StepMetrics
    answers: list[AnswerChange]
    analysis: AnalysisResult
    batch: TrainBatch

    def to_dict(self, include_tokens: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"metrics": self.metrics.to_dict()}
        if include_tokens:
            d["answers"] = [a.to_dict() for a in self.answers]
        return d
