"""An analysed-dataset step (:mod:`gmts_core.run_dataset`) from the per-token numbers a dump
logged, without a model (``gmts analyze-run --model none``): the tokens' logged entropy and
trainer log-prob, their loss masks, the dump's other numbers (``logged_<name>``) and the
train/inference difference; the selections that need only those (``entropy``,
``gmts_entropy`` = |A| w H: :func:`~gmts_core.runs.logged_tokens.model_free_selections`, the
Runs tab's ``numbers=logged`` mode) over the trained tokens. The numbers only the model gives
(g, gamma, and what is derived from them) are written as null; the tokens' texts too (no
tokenizer decodes the ids).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import torch

from gmts_core.config import AnalysisConfig
from gmts_core.errors import InvalidInputError
from gmts_core.methods.aggregation import loss_weights
from gmts_core.run_dataset.writer import StepColumns
from gmts_core.runs.analysis import StepReport
from gmts_core.runs.base import RunStep
from gmts_core.runs.logged_tokens import (
    MODEL_FREE_METHODS,
    LoggedTokens,
    dataset_columns,
    logged_tokens,
    mismatch_columns,
    model_free_selections,
)

MODEL_ONLY = ("grad_norm", "gamma")  # the dataset's numbers only a model gives


def dump_numbers(tokens: LoggedTokens | None, config: AnalysisConfig) -> dict[str, str] | None:
    """What a model-free dataset's columns hold (dataset.json's ``settings["numbers"]``): each
    column ``logged`` (the dump's), ``absent`` (null: needs the model) or how it is derived;
    None where the dump cannot give every model-free selection (no logged entropy or
    advantages): no dataset is written then."""
    if tokens is None or set(model_free_selections(tokens, config)) != set(MODEL_FREE_METHODS):
        return None
    has = tokens.columns
    out = {
        "entropy": "logged (the dump's entropy)",
        "logprob": "logged (the dump's trainer_logprob)"
        if "trainer_logprob" in has
        else "absent (the dump logs no trainer log-prob)",
        **{c: "absent (needs the model)" for c in MODEL_ONLY},
        "text": "absent (no tokenizer decodes the dump's token ids without a model)",
        "trained": "logged (the dump's loss mask)"
        if "loss_mask" in _mask_names(tokens)
        else "every token (the dump logs no loss mask)",
        **{f"logged_{c}": "logged" for c in sorted(has)},
    }
    if tokens.inference is not None:
        out["logprob_diff"] = "logged trainer_logprob - logged inference log-prob"
    for m in MODEL_FREE_METHODS:
        out[f"selected_{m}"] = "computed from the logged numbers, over the trained tokens"
    return out


def _mask_names(tokens: LoggedTokens) -> set[str]:
    return set() if bool(tokens.trained.all()) else {"loss_mask"}


def dump_step_columns(step: RunStep, config: AnalysisConfig, report: StepReport) -> StepColumns:
    """The dataset columns of ``step`` from its dump's numbers alone (``report``: its
    :func:`~gmts_core.runs.dump_report.dump_step_report` row, for the mismatch)."""
    tokens = logged_tokens(step)
    selections = model_free_selections(tokens, config) if tokens is not None else {}
    if tokens is None or set(selections) != set(MODEL_FREE_METHODS):
        raise InvalidInputError(
            f"{step.source}: step {step.step}: the dump logs no entropy and advantages here, "
            "so its dataset step cannot be written without a model"
        )
    lengths = np.array(tokens.lengths, dtype=np.int32)
    n = int(lengths.sum())
    a_group, a_index, prompts, texts, rewards, advantages, ids = [], [], [], [], [], [], []
    for gi, g in enumerate(step.groups):
        for ai, answer_ids in enumerate(g.token_ids or []):
            a_group.append(gi)
            a_index.append(ai)
            prompts.append(g.prompt)
            texts.append(g.answers[ai] if ai < len(g.answers) else "")
            rewards.append(g.rewards[ai] if g.rewards is not None else math.nan)
            advantages.append(g.advantages[ai] if g.advantages is not None else math.nan)
            ids += answer_ids
    counts = torch.bincount(tokens.answer_index[tokens.trained], minlength=len(lengths))
    nan = torch.full((n,), math.nan, dtype=torch.float64)
    trainer = tokens.columns.get("trainer_logprob", nan)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    cols = StepColumns(
        step=step.step,
        methods=MODEL_FREE_METHODS,
        group=np.repeat(np.array(a_group, np.int32), lengths),
        answer=np.repeat(np.array(a_index, np.int32), lengths),
        position=(np.arange(n, dtype=np.int64) - np.repeat(starts, lengths)).astype(np.int32),
        token_id=np.array(ids, dtype=np.int64),
        text=pa.array([None] * n, pa.string()).dictionary_encode(),  # null: not decoded
        logprob=trainer.float().numpy(),
        entropy=tokens.columns["entropy"].float().numpy(),
        grad_norm=np.full(n, np.nan, np.float32),
        gamma=np.full(n, np.nan, np.float32),
        selected={m: s.selected.numpy() for m, s in selections.items()},
        answer_group=np.array(a_group, np.int32),
        answer_index=np.array(a_index, np.int32),
        prompt=prompts,
        answer_text=texts,
        reward=np.array(rewards, np.float32),
        advantage=np.array(advantages, np.float32),
        weight=loss_weights(counts.clamp(min=1), config.loss_aggregation).float().numpy(),
        length=lengths,
        absent=MODEL_ONLY,
    )
    cols.token_extra = dataset_columns(tokens, tokens.trained, trainer)
    cols.step_extra = mismatch_columns(report.mismatch, report.untrained_tokens)
    return cols
