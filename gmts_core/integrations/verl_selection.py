"""The GMTS selection of a verl mini-batch, in plain torch (no verl import, so it is tested
without verl): the GMTS settings and the loss settings read from verl's actor config (by key),
the check of that config, which verl ``loss_agg_mode`` is which answer weight w_i, groups from
verl's ``uid``, and the selected tokens of padded (B, T) verl tensors.

verl hands its actor padded response tensors of one mini-batch: ``old_log_probs``,
``advantages`` (the raw, per-token advantage), ``response_mask``, optionally ``ref_log_prob``,
and a ``uid`` per row (the rows sampled from one prompt share it). Rows of one group need not
be adjacent (``trainer.balance_batch`` reorders them) nor all present (a shuffled mini-batch
holds part of a group), so groups come from the uids, never from blocks of rows.

:func:`select_tokens` flattens the valid tokens in (group, row, position) order, builds the
library's :class:`~gmts_core.methods.selection.SelectionInputs` with the exact coefficient of
verl's loss (:func:`gmts_core.methods.coefficient.effective_coefficient`: ratio, PPO clip,
verl's dual clip ``clip_ratio_c`` as the flat region r > c for A < 0, and the k3 KL term) and
selects with :func:`gmts_core.methods.selection.select` -- the same functions, on the same
numbers, as everywhere else in the project.

:func:`gmts_settings` reads ``policy_loss.gmts_*`` (defaults where a plain config has none),
:func:`loss_settings` the clip range, dual clip, KL weight and aggregation, and
:func:`validate_actor_config` refuses a config GMTS cannot train exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.errors import InvalidInputError
from gmts_core.integrations.trl_selection import grad_norm_from_logprob
from gmts_core.knobs import DEFAULT_RATIO, DEFAULT_TEMPERATURE
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.budget import check_budget_over, with_budget
from gmts_core.methods.coefficient import ClipSettings, effective_coefficient, selection_inputs
from gmts_core.methods.selection import SCOPES, Selection, SelectionInputs, select

# verl policy_loss.loss_mode -> gmts_core selection method
LOSS_MODES: dict[str, str] = {
    "gmts": "gmts",
    "gmts_entropy": "gmts_entropy",
    "gmts_paper": "gmts_paper",
    "gmts_paper_verl": "gmts_paper_verl",
}
# when the selection is made: before every PPO mini-batch at the current policy (Framework2),
# or once per training step at the sampling policy
RESELECT = ("mini_batch", "step")
# verl's KL estimators whose derivative is the library's k3 term: "low_var_kl" is k3 clamped
# to [-10, 10] (the clamp is inactive for |log(pi_ref / pi)| < ~2.5)
K3_TYPES = ("low_var_kl", "k3")
VERL_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


@dataclass(frozen=True)
class GMTSSettings:
    """What to select: the method, k = ceil(ratio * n) per scope, and when."""

    method: str = "gmts_paper_verl"
    ratio: float = DEFAULT_RATIO
    scope: str = "group"  # "group" (as the paper), "batch" (the mini-batch) or "answer"
    reselect: str = "mini_batch"  # "mini_batch" (Framework2) or "step"
    # what k counts (gmts_core.methods.budget): trained (response_mask), content (less the
    # tokenizer's special tokens) or all (in verl the same as trained: the rows hold the
    # response_mask's tokens)
    budget_over: str = "trained"

    def __post_init__(self) -> None:
        check_budget_over(self.budget_over)
        if not 0.0 < self.ratio <= 1.0:
            raise InvalidInputError(f"gmts_ratio must be in (0, 1], got {self.ratio}")
        if self.scope not in SCOPES:
            raise InvalidInputError(f"gmts_scope must be one of {', '.join(SCOPES)}")
        if self.reselect not in RESELECT:
            raise InvalidInputError(f"gmts_reselect must be one of {', '.join(RESELECT)}")


def method_for_loss_mode(loss_mode: str) -> str:
    try:
        return LOSS_MODES[loss_mode]
    except KeyError:
        raise InvalidInputError(
            f"not a GMTS loss_mode: {loss_mode!r}; GMTS modes: {', '.join(LOSS_MODES)}"
        ) from None


def answer_weights(
    lengths: torch.Tensor,
    loss_agg_mode: str,
    horizon: int,
    num_answers: int | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """w_i of verl's ``agg_loss(loss_agg_mode)`` for answers of ``lengths`` (B,), float64.

    token-mean: 1 / sum |o_j|; token-sum: 1 (verl sums the tokens of each rank and scales by
    the data-parallel size, so that the ranks' averaged gradient is the sum over every token of
    the mini-batch); seq-mean-token-mean: 1 / (G |o_i|); seq-mean-token-sum-norm: 1 / (G L)
    with L = ``loss_scale_factor`` or the padded ``horizon``; seq-mean-token-sum: 1 / G (a
    sequence's token sum, averaged over sequences). The library's aggregations have neither
    token-sum nor seq-mean-token-sum. G counts answers with at least one token unless given
    (verl's trainer gives the mini-batch's row count, ``global_batch_size``).
    """
    g = int((lengths > 0).sum()) if num_answers is None else num_answers
    if loss_agg_mode == "token-mean":
        return loss_weights(lengths, "token_mean")
    if loss_agg_mode == "token-sum":
        return torch.ones_like(lengths, dtype=torch.float64)
    if loss_agg_mode == "seq-mean-token-mean":
        return 1.0 / (max(g, 1) * lengths.clamp_min(1).double())
    if loss_agg_mode == "seq-mean-token-sum-norm":
        scale = float(loss_scale_factor) if loss_scale_factor is not None else float(horizon)
        return torch.full_like(lengths, 1.0, dtype=torch.float64) / (max(g, 1) * scale)
    if loss_agg_mode == "seq-mean-token-sum":
        return torch.full_like(lengths, 1.0 / max(g, 1), dtype=torch.float64)
    raise InvalidInputError(
        f"GMTS does not support loss_agg_mode {loss_agg_mode!r}; "
        f"supported: {', '.join(VERL_AGG_MODES)}"
    )


def check_aggregation(loss_agg_mode: str, loss_scale_factor: float | None = None) -> None:
    """Refuse a ``loss_agg_mode`` whose weights w_i are not known before verl splits the
    mini-batch into micro-batches (raises :class:`InvalidInputError` with the reason)."""
    if loss_agg_mode not in VERL_AGG_MODES:
        raise InvalidInputError(
            f"GMTS does not support loss_agg_mode {loss_agg_mode!r}; "
            f"supported: {', '.join(VERL_AGG_MODES)}"
        )
    if loss_agg_mode == "seq-mean-token-sum-norm" and loss_scale_factor is None:
        raise InvalidInputError(
            "loss_agg_mode seq-mean-token-sum-norm needs actor.loss_scale_factor with GMTS (e.g. "
            "data.max_response_length): without it verl 0.9.1 divides each micro-batch's loss "
            "by that micro-batch's padded response width, so the loss, and the weight w_i GMTS "
            "ranks tokens by, change with how the mini-batch is split into micro-batches"
        )


def group_ids(uids: Sequence[object]) -> torch.Tensor:
    """Row -> group index (B,) int64, groups numbered by first appearance of their uid."""
    seen: dict[object, int] = {}
    return torch.tensor([seen.setdefault(u, len(seen)) for u in uids], dtype=torch.long)


@dataclass
class TokenBatch:
    """Padded verl response tensors (B, T) of the rows one selection covers (all DP ranks)."""

    response_mask: torch.Tensor  # bool/int (B, T)
    entropy: torch.Tensor  # H at the current policy, nats (B, T)
    log_prob: torch.Tensor  # log pi_theta(y_t) at the current policy (B, T)
    old_log_prob: torch.Tensor  # log pi_old(y_t) (B, T)
    advantages: torch.Tensor  # verl's per-token advantage (B, T)
    uids: Sequence[object]  # (B,)
    ref_log_prob: torch.Tensor | None = None  # (B, T), with use_kl_loss
    sum_pi_squared: torch.Tensor | None = None  # sum_v pi_v^2 (B, T), needed by "gmts"
    num_answers: int | None = None  # G of the seq-mean modes (verl's global_batch_size)
    special: torch.Tensor | None = None  # bool (B, T): the tokenizer's special tokens


@dataclass
class TokenSelection:
    """A selection of a :class:`TokenBatch`: the library's inputs and result, flat in
    (group, row, position) order, and the mask in the batch's own (B, T) layout."""

    inputs: SelectionInputs
    selection: Selection
    mask: torch.Tensor  # bool (B, T): True where the token is trained
    order: torch.Tensor  # (B,) the rows in flat order
    valid: torch.Tensor  # bool (B, T): the response tokens (verl's response_mask)
    weight: torch.Tensor  # (N,) w_i of each flat token's answer


@dataclass(frozen=True)
class LossSettings:
    """The parts of verl's actor config the coefficient and weights depend on."""

    clip: ClipSettings
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: float | None = None
    temperature: float = DEFAULT_TEMPERATURE
    vocab_size: int = 2


def gmts_settings(policy_loss: Any) -> GMTSSettings:
    """The GMTS settings of a policy-loss config (defaults where a plain config has none)."""
    return GMTSSettings(
        method=method_for_loss_mode(policy_loss.get("loss_mode")),
        ratio=float(policy_loss.get("gmts_ratio", DEFAULT_RATIO)),
        scope=str(policy_loss.get("gmts_scope", "group")),
        reselect=str(policy_loss.get("gmts_reselect", "mini_batch")),
        budget_over=str(policy_loss.get("gmts_budget_over", "trained")),
    )


def validate_actor_config(config: Any) -> None:
    """Refuse, when the config is built, an actor config GMTS cannot train exactly: bad GMTS
    settings, an aggregation whose weights depend on the micro-batching
    (:func:`check_aggregation`) or a KL estimator other than k3 (:func:`kl_weight`). Raises
    :class:`~gmts_core.errors.InvalidInputError` (a ``ValueError``)."""
    gmts_settings(config.policy_loss)
    check_aggregation(
        config.get("loss_agg_mode", "token-mean"), config.get("loss_scale_factor", None)
    )
    kl_weight(config)


def kl_weight(config: Any) -> float:
    """beta of the actor's KL loss (0 without one); refuses a KL estimator other than k3."""
    beta = float(config.get("kl_loss_coef", 0.0)) if config.get("use_kl_loss", False) else 0.0
    if beta != 0.0 and config.get("kl_loss_type", "low_var_kl") not in K3_TYPES:
        raise InvalidInputError(
            f"GMTS's coefficient has the k3 KL term; kl_loss_type {config.get('kl_loss_type')!r} "
            f"is not supported (supported: {', '.join(K3_TYPES)})"
        )
    return beta


def loss_settings(config: Any, temperature: float, vocab_size: int) -> LossSettings:
    """Clip range, dual clip, KL weight and aggregation of verl's actor config."""
    clip = config.get("clip_ratio", 0.2)
    low = config.get("clip_ratio_low") if config.get("clip_ratio_low") is not None else clip
    high = config.get("clip_ratio_high") if config.get("clip_ratio_high") is not None else clip
    beta = kl_weight(config)
    return LossSettings(
        clip=ClipSettings(
            float(low), float(high), beta, delta=float(config.get("clip_ratio_c", 3.0))
        ),
        loss_agg_mode=config.get("loss_agg_mode", "token-mean"),
        loss_scale_factor=config.get("loss_scale_factor", None),
        temperature=temperature,
        vocab_size=vocab_size,
    )


def select_tokens(
    batch: TokenBatch, settings: GMTSSettings, loss: LossSettings, seed: int = 0
) -> TokenSelection:
    """The GMTS selection of ``batch`` (module docstring), computed with gmts_core's functions."""
    valid = batch.response_mask.bool()  # (B, T)
    rows = group_ids(batch.uids)  # (B,)
    order = torch.sort(rows, stable=True).indices  # (B,) rows grouped, batch order within
    v = valid[order]  # (B, T) in flat order

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t[order][v].double()  # (N,)

    lengths = valid.sum(-1)[order]  # (B,)
    weight_row = answer_weights(
        lengths, loss.loss_agg_mode, valid.shape[-1], batch.num_answers, loss.loss_scale_factor
    )
    answer = torch.arange(len(order)).unsqueeze(1).expand_as(v)[v]  # (N,)
    logp = flat(batch.log_prob)
    coefficient = effective_coefficient(
        flat(batch.advantages),
        weight_row[answer],
        loss.clip,
        logp,
        flat(batch.old_log_prob),
        None if batch.ref_log_prob is None else flat(batch.ref_log_prob),
    )
    if batch.sum_pi_squared is not None:
        log_sq = flat(batch.sum_pi_squared).clamp_min(1e-30).log()
        grad_norm = grad_norm_from_logprob(logp, log_sq, loss.temperature, loss.vocab_size)
    elif settings.method == "gmts":
        raise InvalidInputError("loss_mode gmts needs sum_pi_squared (g) from the forward")
    else:
        grad_norm = torch.full_like(logp, float("nan"))  # g is not computed for this method
    x = selection_inputs(
        entropy=flat(batch.entropy),
        logprob=logp,
        grad_norm=grad_norm,
        weight=weight_row[answer],
        answer_index=answer,
        group_index=rows[order].unsqueeze(1).expand_as(v)[v],
        coefficient=coefficient,
        seed=seed,
        advantage=flat(batch.advantages),
    )
    special = None if batch.special is None else batch.special[order][v].bool()
    x = with_budget(x, settings.budget_over, special)
    sel = select(x, settings.method, settings.ratio, settings.scope)
    mask_flat = torch.zeros_like(v)
    mask_flat[v] = sel.selected
    mask = torch.zeros_like(valid)
    mask[order] = mask_flat
    return TokenSelection(x, sel, mask, order, valid, weight_row[answer])
