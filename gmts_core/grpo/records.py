"""Typed results of a GRPO step: the batch, the update, metrics and per-token log-prob changes."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from gmts_core.analysis.records import AnalysisResult
from gmts_core.methods.coefficient import EffectiveCoefficient

if TYPE_CHECKING:
    from gmts_core.config import RLConfig


@dataclass
class TrainBatch:
    """Flat per-token training tensors, (N,) in (group, answer, position) order."""

    sequences: list[tuple[list[int], list[int]]]  # (prompt_ids, answer_ids) per answer
    advantages: torch.Tensor  # float64, A_i of the token's answer
    weights: torch.Tensor  # float64, w_i of the token's answer
    mask: torch.Tensor  # bool, selected by the training method
    answer_index: torch.Tensor  # int64
    group_index: torch.Tensor | None = None  # int64 (for re-selection with scope "group")
    rewards: torch.Tensor | None = None  # float64, r_i of the token's answer (re-selection)

    @property
    def num_tokens(self) -> int:
        return int(self.mask.numel())


@dataclass
class UpdateStats:
    """Means over the inner steps, and the batch's log-probs before and after the update."""

    loss: float
    policy_loss: float
    kl: float
    grad_norm: float
    clip_low_fraction: float
    clip_high_fraction: float
    logprob_before: torch.Tensor  # (N,)
    logprob_after: torch.Tensor | None  # (N,); None unless measure_logprob_after
    per_inner_step: list[dict[str, float]] = field(default_factory=list)
    # per inner update: each token's ratio, clip flag and omega_t, and the mask trained on
    coefficients: list[EffectiveCoefficient] = field(default_factory=list)
    masks: list[torch.Tensor] = field(default_factory=list)


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
    # mean (after - before) over the selected tokens whose log-prob after was measured (all, or
    # the first ``logprob_after_prompts`` prompts'); NaN (JSON null) unless measure_logprob_after,
    # and where no such token was measured
    selected_logprob_change: float = 0.0
    unselected_logprob_change: float = 0.0  # the same over the other measured tokens
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
        measured = ~delta.isnan() if after is not None else torch.ones_like(mask)
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
            selected_logprob_change=_mean_over(delta, mask & measured),
            unselected_logprob_change=_mean_over(delta, ~mask & measured),
        )


def _mean_over(values: torch.Tensor, rows: torch.Tensor) -> float:
    """The mean of ``values`` over ``rows``; NaN (JSON null: nothing to average, not "no
    change") over no row."""
    return float(values[rows].mean()) if rows.any() else float("nan")


@dataclass
class TokenChange:
    """One answer token's log-probability before and after the step's update."""

    position: int
    id: int
    text: str
    selected: bool
    logprob_before: float
    logprob_after: float | None  # None when the step did not measure it (for this token)

    @property
    def logprob_change(self) -> float | None:
        after = self.logprob_after
        return None if after is None else after - self.logprob_before


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


def answer_changes(
    result: AnalysisResult, mask: torch.Tensor, before: torch.Tensor, after: torch.Tensor | None
) -> list[AnswerChange]:
    """Per answer, each token's text, selection flag and log-prob before/after the update
    (after: None where not measured, NaN rows of ``after`` included)."""
    sel, lp0 = mask.tolist(), before.tolist()
    lp1: list[float | None] = [None] * len(lp0)
    if after is not None:
        lp1 = [None if math.isnan(v) else v for v in after.tolist()]
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
    """A step's metrics, the analysis it trained on, its batch, and the batch's log-probs before
    and after the update; :attr:`answers` (per-token changes) is built on first access."""

    metrics: StepMetrics
    analysis: AnalysisResult
    batch: TrainBatch
    logprob_before: torch.Tensor  # (N,)
    logprob_after: torch.Tensor | None = None  # (N,); None unless measure_logprob_after

    @functools.cached_property
    def answers(self) -> list[AnswerChange]:
        """Per answer, each token's text, selection flag and log-prob change (built when a
        front end asks for the batch's tokens, e.g. the session step body's ``last_batch``)."""
        before, after = self.logprob_before, self.logprob_after
        return answer_changes(self.analysis, self.batch.mask, before, after)
