"""A step's report row from the per-token numbers its dump logged, without a model
(``gmts analyze-run`` without ``--model`` on a prime-rl export, for instance)."""

from __future__ import annotations

import math
from statistics import fmean, pstdev

from gmts_core.analysis.summaries import overlap
from gmts_core.config import AnalysisConfig
from gmts_core.errors import InvalidInputError
from gmts_core.runs.analysis import StepReport
from gmts_core.runs.base import RunStep
from gmts_core.runs.logged_tokens import (
    logged_tokens,
    model_free_mismatch,
    model_free_selections,
    numbers_note,
)


def dump_step_report(step: RunStep, config: AnalysisConfig) -> StepReport:
    """The report row of a step from the per-token numbers its dump logged, no model: the
    model-free selections (``entropy``, ``gmts_entropy``: :func:`~gmts_core.runs.
    logged_tokens.model_free_selections`) over the trained tokens and the train/inference
    mismatch; the figures that need the gradient (coverage, wasted share) are absent."""
    tokens = logged_tokens(step)
    if tokens is None:
        raise InvalidInputError(
            f"{step.source}: the dump holds no per-token numbers; a model is needed"
        )
    selections = model_free_selections(tokens, config)
    trained = tokens.trained
    rewards = [r for g in step.groups for r in (g.rewards or []) if not math.isnan(r)]
    zero = sum(all(a == 0 for a in (g.advantages or [math.nan])) for g in step.groups)
    entropy = tokens.columns.get("entropy")
    names = list(selections)
    return StepReport(
        step=step.step,
        source=step.source,
        num_groups=len(step.groups),
        num_answers=len(tokens.lengths),
        num_tokens=int(trained.sum()),
        reward_mean=fmean(rewards) if rewards else None,
        reward_std=pstdev(rewards) if rewards else None,
        zero_signal_share=zero / max(len(step.groups), 1),
        mean_answer_length=sum(tokens.lengths) / max(len(tokens.lengths), 1),
        selected_count={m: int(s.selected.sum()) for m, s in selections.items()},
        gradient_coverage={},
        wasted_share={},
        overlap={
            f"{a}|{b}": overlap(selections[a].selected[trained], selections[b].selected[trained])[
                "jaccard"
            ]
            for i, a in enumerate(names)
            for b in names[i + 1 :]
        },
        spearman_batch=None,
        spearman_within_answer_median=None,
        mode="logged",
        entropy_mean=float(entropy[trained].mean())
        if entropy is not None and trained.any()
        else None,
        untrained_tokens=int((~trained).sum()),
        numbers=numbers_note(tokens, recomputed=False),
        mismatch=model_free_mismatch(tokens, selections),
    )
