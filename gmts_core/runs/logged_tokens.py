"""The per-token numbers a trainer's dump already carries, used before any model: entropy,
log-probs (the trainer's and the inference engine's), advantages and loss masks
(:data:`gmts_core.runs.token_samples.TOKEN_COLUMNS`; miles' ``rollout_log_probs`` counts as the
inference engine's).

- :func:`logged_step_report`: a step's report row from the logged numbers alone (no model):
  the selections that need no gradient, ``entropy`` (H) and ``gmts_entropy`` (|A| w H), over
  the trained tokens, and the train/inference mismatch.
- :func:`compare_with_analysis`: with a model, the logged numbers beside the recomputed ones
  (mean |difference| per number) and the mismatch of each method's selection.

The train/inference mismatch of a token is delta = log pi_trainer(y) - log pi_inference(y)
(nats; the importance ratio is exp(delta)); a token is *high-mismatch* when |delta| exceeds
:data:`MISMATCH_THRESHOLD`. Where the dump has no trainer log-probs, the model's recomputed
ones stand in (``mismatch["trainer_side"]`` says which).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.analysis.records import AnalysisResult
from gmts_core.config import AnalysisConfig
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.budget import with_budget
from gmts_core.methods.selection import Selection, SelectionInputs, select
from gmts_core.runs.base import RunStep

MISMATCH_THRESHOLD = 0.1  # nats: |log pi_trainer - log pi_inference| above it is high-mismatch
INFERENCE_COLUMNS = ("inference_logprob", "rollout_log_probs")  # the engine's, by preference
NUMBERS = ("entropy", "trainer_logprob", "inference_logprob", "advantage", "loss_mask")
MODEL_FREE_METHODS = ("entropy", "gmts_entropy")  # selections the logged numbers suffice for


@dataclass
class LoggedTokens:
    """A step's logged per-token numbers, flat in (group, answer, position) order, each (N,)
    float64 (NaN where an answer lacks it); ``trained`` bool; the answers' and groups'
    indices int64; ``lengths`` the answers' token counts."""

    columns: dict[str, torch.Tensor]
    trained: torch.Tensor
    answer_index: torch.Tensor
    group_index: torch.Tensor
    advantage: torch.Tensor  # each token's answer's advantage (NaN: not in the dump)
    lengths: list[int]

    @property
    def inference(self) -> torch.Tensor | None:
        return next((self.columns[c] for c in INFERENCE_COLUMNS if c in self.columns), None)


def logged_tokens(step: RunStep) -> LoggedTokens | None:
    """The step's logged per-token numbers; None where its groups store no token ids or no
    per-token number."""
    groups = step.groups
    if not groups or any(g.token_ids is None for g in groups):
        return None
    names = sorted({c for g in groups for c in g.token_columns if c != "loss_mask"})
    if not names and not any("loss_mask" in g.token_columns for g in groups):
        return None
    values: dict[str, list[float]] = {c: [] for c in names}
    trained: list[bool] = []
    answer_index: list[int] = []
    group_index: list[int] = []
    advantage: list[float] = []
    lengths: list[int] = []
    answer = 0
    for gi, g in enumerate(groups):
        for ai, ids in enumerate(g.token_ids or []):
            n = len(ids)
            for c in names:
                column = g.token_columns.get(c)
                row = column[ai] if column is not None else None
                # None: a value the dump could not hold (and NaN after the reading worker's wire)
                values[c] += (
                    [math.nan if v is None else float(v) for v in row]
                    if row is not None
                    else [math.nan] * n
                )
            masks = g.token_columns.get("loss_mask")
            mask = masks[ai] if masks is not None else None
            trained += [bool(m) for m in mask] if mask is not None else [True] * n
            answer_index += [answer] * n
            group_index += [gi] * n
            adv = g.advantages[ai] if g.advantages is not None else math.nan
            advantage += [adv] * n
            lengths.append(n)
            answer += 1
    f64, i64 = torch.float64, torch.int64
    return LoggedTokens(
        columns={c: torch.tensor(v, dtype=f64) for c, v in values.items()},
        trained=torch.tensor(trained, dtype=torch.bool),
        answer_index=torch.tensor(answer_index, dtype=i64),
        group_index=torch.tensor(group_index, dtype=i64),
        advantage=torch.tensor(advantage, dtype=f64),
        lengths=lengths,
    )


def mismatch_summary(
    delta: torch.Tensor,
    trained: torch.Tensor,
    selections: dict[str, torch.Tensor],
    trainer_side: str,
    threshold: float = MISMATCH_THRESHOLD,
) -> dict[str, Any]:
    """The step's train/inference mismatch over its trained tokens: mean and max |delta|, the
    mean importance ratio, the share of tokens above ``threshold``; per method, the share of
    its selected tokens above it (``selected_share_above``) and the share of the high-mismatch
    tokens it selects (``selects_of_high``). None where undefined (no token, no selection)."""
    ok = trained & ~torch.isnan(delta)
    d = delta[ok]
    high = d.abs() > threshold
    out: dict[str, Any] = {
        "trainer_side": trainer_side,
        "threshold": threshold,
        "num_tokens": int(d.numel()),
        "mean_abs_logprob_diff": float(d.abs().mean()) if d.numel() else None,
        "max_abs_logprob_diff": float(d.abs().max()) if d.numel() else None,
        "mean_importance_ratio": float(d.exp().mean()) if d.numel() else None,
        "share_above": float(high.double().mean()) if d.numel() else None,
        "selected_share_above": {},
        "selects_of_high": {},
    }
    for method, selected in selections.items():
        chosen = selected[ok]
        n = int(chosen.sum())
        out["selected_share_above"][method] = int((chosen & high).sum()) / n if n else None
        n_high = int(high.sum())
        out["selects_of_high"][method] = int((chosen & high).sum()) / n_high if n_high else None
    return out


def model_free_selections(tokens: LoggedTokens, config: AnalysisConfig) -> dict[str, Selection]:
    """``entropy`` (H) and ``gmts_entropy`` (|A| w H, on-policy, no KL term) from the logged
    entropy and advantages, over the trained tokens (the analysis's budget and scope rules);
    {} where the dump logs no entropy (and no ``gmts_entropy`` without advantages)."""
    entropy = tokens.columns.get("entropy")
    if entropy is None:
        return {}
    trained_counts = torch.bincount(
        tokens.answer_index[tokens.trained], minlength=len(tokens.lengths)
    ).clamp(min=1)
    weights = loss_weights(trained_counts, config.loss_aggregation).double()  # (A,)
    weight = weights[tokens.answer_index]
    nan = torch.full_like(entropy, math.nan)
    x = SelectionInputs(
        entropy=entropy,
        logprob=tokens.columns.get("trainer_logprob", nan),
        grad_norm=nan,  # needs the model
        grad_proxy=nan,
        signal_scale=tokens.advantage.abs() * weight,
        answer_index=tokens.answer_index,
        group_index=tokens.group_index,
        seed=config.seed,
        advantage=tokens.advantage,
        trained=tokens.trained,
    )
    methods = ["entropy"] + (["gmts_entropy"] if not torch.isnan(tokens.advantage).any() else [])
    x = with_budget(x, config.budget_over)  # no tokenizer here: content is the mask's
    return {m: select(x, m, config.ratio, config.scope) for m in methods}


def numbers_note(tokens: LoggedTokens | None, recomputed: bool) -> dict[str, str]:
    """Which per-token numbers are logged (from the dump) and which recomputed (the model)."""
    logged = set(tokens.columns) if tokens is not None else set()
    out = {c: "logged" for c in sorted(logged)}
    if tokens is not None and not bool(tokens.trained.all()):
        out["loss_mask"] = "logged"
    if recomputed:
        for c in ("entropy_recomputed", "logprob_recomputed", "grad_norm", "grad_proxy"):
            out[c] = "recomputed"
    return out


def compare_with_analysis(
    tokens: LoggedTokens, result: AnalysisResult
) -> tuple[dict[str, float | None], dict[str, Any] | None]:
    """With a model: the mean |logged - recomputed| of entropy and of the trainer's log-prob
    over trained tokens, and the mismatch summary of the analysis's selections (the trainer
    side logged where the dump has it, else the model's recomputed log-prob)."""
    x = result.inputs
    if x is None or x.num_tokens != tokens.trained.numel():
        return {}, None
    ok = tokens.trained
    diffs: dict[str, float | None] = {}
    for logged, recomputed in (("entropy", x.entropy), ("trainer_logprob", x.logprob)):
        if logged in tokens.columns:
            d = (tokens.columns[logged] - recomputed.double().cpu())[ok]
            d = d[~torch.isnan(d)]
            diffs[logged] = float(d.abs().mean()) if d.numel() else None
    inference = tokens.inference
    if inference is None:
        return diffs, None
    if "trainer_logprob" in tokens.columns:
        trainer, side = tokens.columns["trainer_logprob"], "logged"
    else:
        trainer, side = x.logprob.double().cpu(), "recomputed by the model"
    selections = {m: s.selected.cpu() for m, s in result.selections.items()}
    return diffs, mismatch_summary(trainer - inference, ok, selections, side)


def model_free_mismatch(tokens: LoggedTokens, selections: dict[str, Selection]) -> dict | None:
    """The mismatch summary from the logged numbers alone (None: the dump lacks either side)."""
    inference = tokens.inference
    trainer = tokens.columns.get("trainer_logprob")
    if inference is None or trainer is None:
        return None
    chosen = {m: s.selected for m, s in selections.items()}
    return mismatch_summary(trainer - inference, tokens.trained, chosen, "logged")


def token_numbers(
    tokens: LoggedTokens, recomputed_logprob: torch.Tensor | None = None
) -> list[dict[str, float]]:
    """Each token's logged numbers (the dump's columns; NaN left out) and its train/inference
    mismatch: ``logprob_diff`` = log pi_trainer - log pi_inference (nats) and
    ``importance_ratio`` (the dump's own where it logs one, else exp of the difference). The
    trainer side is the logged ``trainer_logprob``, else ``recomputed_logprob`` (the model's;
    the token's dict then has no ``trainer_logprob``, which is how a view tells the two apart).
    One dict per token, in :func:`logged_tokens`' order."""
    names = sorted(tokens.columns)
    values = {c: tokens.columns[c].tolist() for c in names}
    inference = tokens.inference
    trainer = tokens.columns.get("trainer_logprob", recomputed_logprob)
    diff = (
        (trainer.double().cpu() - inference).tolist()
        if inference is not None and trainer is not None
        else None
    )
    out: list[dict[str, float]] = []
    for i in range(tokens.trained.numel()):
        row = {c: values[c][i] for c in names if not math.isnan(values[c][i])}
        if diff is not None and not math.isnan(diff[i]):
            row["logprob_diff"] = diff[i]
            row.setdefault("importance_ratio", math.exp(min(diff[i], 50.0)))
        out.append(row)
    return out


def dataset_columns(
    tokens: LoggedTokens | None, trained: torch.Tensor | None, recomputed_logprob: torch.Tensor
) -> dict[str, Any]:
    """The analysed dataset's optional per-token columns (gmts_core.run_dataset.schema's
    OPTIONAL_TOKEN_COLUMNS): ``trained``, the dump's ``logged_<name>`` numbers and
    ``logprob_diff`` (the trainer side logged, else ``recomputed_logprob``). ``tokens`` None
    (the dump logs none) or of another length gives ``trained`` alone."""
    n = recomputed_logprob.numel()
    mask = trained if trained is not None else torch.ones(n, dtype=torch.bool)
    out: dict[str, Any] = {"trained": mask.cpu().numpy().astype(bool)}
    if tokens is None or tokens.trained.numel() != n:
        return out
    for name, values in tokens.columns.items():
        out[f"logged_{name}"] = values.float().numpy()
    inference = tokens.inference
    if inference is not None:
        trainer = tokens.columns.get("trainer_logprob", recomputed_logprob.double().cpu())
        out["logprob_diff"] = (trainer - inference).float().numpy()
    return out


def mismatch_columns(mismatch: dict[str, Any] | None, untrained: int) -> dict[str, Any]:
    """The analysed dataset's optional step columns (OPTIONAL_STEP_COLUMNS) from a step's
    :func:`mismatch_summary` (none of the mismatch's where the dump has no inference side)."""
    out: dict[str, Any] = {"untrained_tokens": int(untrained)}
    if mismatch is None:
        return out
    out["mismatch_threshold"] = float(mismatch["threshold"])
    out["mismatch_share_above"] = mismatch["share_above"]
    out["mismatch_mean_abs"] = mismatch["mean_abs_logprob_diff"]
    for method, share in mismatch["selected_share_above"].items():
        out[f"mismatch_selected_share_{method}"] = share
    return out
