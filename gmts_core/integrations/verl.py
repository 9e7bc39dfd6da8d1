"""GMTS inside verl: four policy-loss modes and the selection of their tokens.

Importing this module does two things in the process that imports it (it reaches verl only
through :mod:`~gmts_core.integrations.verl_compat`, the one module in gmts_core that imports
verl, which checks the installed release and holds the method replacements):

1. registers ``gmts``, ``gmts_entropy``, ``gmts_paper`` and ``gmts_paper_verl`` with
   ``verl.trainer.ppo.core_algos.register_policy_loss``, so
   ``actor_rollout_ref.actor.policy_loss.loss_mode=gmts_paper`` selects one of them;
2. installs the selection (:func:`install_hook`), which wraps verl's engine
   ``TrainingWorker.train_batch`` (one PPO mini-batch) and
   ``train_mini_batch`` (one training step): when the actor's loss mode is a GMTS mode, the
   wrapper first runs verl's own forward (``engine.infer_batch`` with ``calculate_entropy``
   and ``calculate_sum_pi_squared``: verl computes H and sum pi^2 with its own kernels) at the
   current policy, selects per ``uid`` group with
   :func:`gmts_core.integrations.verl_selection.select_tokens` over the rows of all
   data-parallel ranks, and zeroes the advantage of every token left out -- as the paper's
   Framework2 does. The registered loss is then verl's own
   clipped loss (``compute_policy_loss_vanilla``) on those advantages: unselected tokens add
   nothing to the policy term, while the KL and entropy terms and every denominator still
   cover all tokens.

The mask is written into the mini-batch's ``advantages`` (and, as 1/0, into a field
``gmts_selected`` of the same layout) before verl splits it into micro-batches, so verl's
dynamic batch sizes (``rearrange_micro_batches``) and sequence packing (``use_remove_padding``)
carry it with its rows; the pre-pass's outputs come back in row order through verl's
``restore_dynamic_batch``. The loss reads ``gmts_selected`` of its micro-batch for
``actor/pg_clipfrac`` and ``actor/pg_clipfrac_lower``, which count over the selected tokens.

The GMTS settings and the actor's aggregation and KL settings are checked when verl builds the
actor config (``ActorConfig.__post_init__``, wrapped on import; the driver's
``validate_config`` builds it before any worker starts):
:func:`~gmts_core.integrations.verl_selection.validate_actor_config`.

verl imports the module in its workers through the policy-loss config's ``_target_``
(:class:`GMTSPolicyLossConfig`, which also carries the GMTS settings)::

    actor_rollout_ref.actor.policy_loss._target_=gmts_core.integrations.verl.GMTSPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=gmts_paper_verl
    +actor_rollout_ref.actor.policy_loss.gmts_ratio=0.2

and, when ``gmts_log_dir`` is set (e.g. ``${trainer.rollout_data_dir}``), the first
data-parallel rank writes every selection to ``gmts_log_dir/gmts_selection/
selection_{step:05d}.parquet`` (:class:`~gmts_core.integrations.verl_log.VerlSelectionLog`),
which the Runs tab opens as the token log of what was trained.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.integrations import verl_compat as compat
from gmts_core.integrations.verl_log import VerlSelectionLog
from gmts_core.integrations.verl_selection import (
    LOSS_MODES,
    TokenBatch,
    TokenSelection,
    gmts_settings,
    loss_settings,
    select_tokens,
    validate_actor_config,
)
from gmts_core.knobs import DEFAULT_RATIO
from gmts_core.methods.budget import special_ids, special_mask

logger = logging.getLogger(__name__)

_PADDED_FIELDS = ("response_mask", "old_log_probs", "advantages")


@dataclass
class GMTSPolicyLossConfig(compat.PolicyLossConfig):
    """verl's policy-loss config plus the GMTS settings (``policy_loss.gmts_*``)."""

    gmts_ratio: float = DEFAULT_RATIO  # k = ceil(ratio * n) tokens kept per scope (20%: the paper)
    gmts_scope: str = "group"  # "group" (one uid), "batch" (the mini-batch) or "answer"
    gmts_reselect: str = "mini_batch"  # "mini_batch": at the current policy; "step": once
    gmts_budget_over: str = "trained"  # what k counts: trained, content (less special tokens), all
    gmts_log_dir: str | None = None  # write gmts_selection/selection_NNNNN.parquet here
    gmts_seed: int = 0  # for the random control only

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        if self.loss_mode in LOSS_MODES:
            gmts_settings(self)  # raises InvalidInputError on a bad ratio, scope or reselect


# ---- the selection, before verl's loss ---------------------------------------------------


def _gather(local: dict[str, Any], group: Any) -> list[dict[str, Any]]:
    """Every data-parallel rank's ``local`` (CPU tensors and lists), in rank order."""
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return [local]
    size = torch.distributed.get_world_size(group)
    if size == 1:
        return [local]
    out: list[Any] = [None] * size
    torch.distributed.all_gather_object(out, local, group=group)
    return out


def _pad_cat(parts: list[torch.Tensor]) -> torch.Tensor:
    width = max(p.shape[1] for p in parts)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts])


def _rows(t: Any, width: int) -> torch.Tensor:
    """A padded (B, width) int64 copy of a padded or jagged (B, *) id tensor."""
    if t.is_nested:
        t = t.to_padded_tensor(0)
    t = t[:, :width].long().cpu()
    return torch.nn.functional.pad(t, (0, width - t.shape[1]))


def row_texts(worker: Any, data: Any, width: int) -> tuple[torch.Tensor, list[tuple[str, str]]]:
    """Response ids (B, width) and the (prompt, completion) text of every row, decoded as
    verl's own rollout dump decodes them (``skip_special_tokens=True``)."""
    tok = compat.tokenizer(worker)
    responses = _rows(data["responses"], width)
    mask = data.select("response_mask").to_padded_tensor()["response_mask"][:, :width].bool().cpu()
    prompts = data["prompts"]
    prompt_rows = prompts.unbind() if prompts.is_nested else list(prompts)
    texts = [
        (
            tok.decode(p.tolist(), skip_special_tokens=True),
            tok.decode(responses[i][mask[i]].tolist(), skip_special_tokens=True),
        )
        for i, p in enumerate(prompt_rows)
    ]
    return responses, texts


def special_rows(worker: Any, data: Any, width: int) -> torch.Tensor:
    """bool (B, width): which response tokens are the tokenizer's special tokens."""
    responses = _rows(data["responses"], width)
    ids = special_ids(compat.tokenizer(worker))
    return special_mask(responses.reshape(-1), ids).view(responses.shape)


def apply_selection(worker: Any, data: Any, config: Any) -> TokenSelection:
    """Select the tokens of mini-batch ``data`` at the current policy and zero the advantage of
    the others in place; returns the selection of the whole (all-rank) mini-batch."""
    settings = gmts_settings(config.policy_loss)
    if "uid" not in data.keys():
        raise ValueError(
            "GMTS selects per group and needs verl's per-row 'uid' in the actor's batch"
        )
    stats = compat.current_token_stats(worker, data)
    fields = [f for f in _PADDED_FIELDS + ("ref_log_prob",) if f in data.keys()]
    padded = data.select(*fields).to_padded_tensor()
    width = padded["response_mask"].shape[1]
    local: dict[str, Any] = {k: v[:, :width].detach().float().cpu() for k, v in stats.items()}
    local.update({k: padded[k].detach().float().cpu() for k in fields})
    local["uid"] = list(data["uid"])
    if settings.budget_over == "content":  # the tokenizer's special tokens leave the budget
        local["special"] = special_rows(worker, data, width).float()
    log_dir = config.policy_loss.get("gmts_log_dir", None)
    if log_dir:
        local["responses"], local["texts"] = row_texts(worker, data, width)
    group = compat.data_parallel_group(worker)
    parts = _gather(local, group)
    rank = 0 if len(parts) == 1 else torch.distributed.get_rank(group)
    start = sum(len(p["uid"]) for p in parts[:rank])
    cat = {k: _pad_cat([p[k] for p in parts]) for k in local if k not in ("uid", "texts")}
    batch = TokenBatch(
        response_mask=cat["response_mask"].bool(),
        entropy=cat["entropy"],
        log_prob=cat["log_prob"],
        old_log_prob=cat["old_log_probs"],
        advantages=cat["advantages"],
        uids=[u for p in parts for u in p["uid"]],
        ref_log_prob=cat.get("ref_log_prob") if config.get("use_kl_loss", False) else None,
        sum_pi_squared=cat.get("sum_pi_squared"),
        num_answers=compat.batch_setting(data, "global_batch_size", None),
        special=cat["special"].bool() if "special" in cat else None,
    )
    temperature = float(compat.batch_setting(data, "temperature", 1.0) or 1.0)
    selection = select_tokens(
        batch,
        settings,
        loss_settings(config, temperature, compat.vocab_size(worker)),
        config.policy_loss.get("gmts_seed", 0),
    )
    n_local = len(local["uid"])
    mask = selection.mask[start : start + n_local]  # (B_local, T_global)
    _write_selection(data, mask)
    state = compat.STATE
    state.selections += 1
    state.last, state.last_local_rows = selection, (start, start + n_local)
    if log_dir and rank == 0:
        texts = [t for p in parts for t in p["texts"]]
        log = compat.worker_log(
            worker, lambda: VerlSelectionLog(log_dir, settings.ratio, settings.scope)
        )
        log.record(selection, cat["responses"], texts)
    return selection


def _write_selection(data: Any, mask: torch.Tensor) -> None:
    """advantages *= mask and ``gmts_selected`` = mask (1/0 in the advantages' dtype), both
    in the advantages' layout (padded (B, T) or jagged)."""
    adv = data["advantages"]
    if adv.is_nested:
        lengths = adv.offsets().diff().tolist()
        keep = [mask[i, : len(r)].to(r.device, r.dtype) for i, r in enumerate(adv.unbind())]
        assert [len(k) for k in keep] == lengths
        rows = [r * k for r, k in zip(adv.unbind(), keep, strict=True)]
        data["advantages"] = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
        data[compat.SELECTED_FIELD] = torch.nested.as_nested_tensor(keep, layout=torch.jagged)
    else:
        keep_padded = mask[:, : adv.shape[1]].to(adv.device, adv.dtype)
        data["advantages"] = adv * keep_padded
        data[compat.SELECTED_FIELD] = keep_padded


def install_hook(worker_cls: Any = compat.TrainingWorker) -> None:
    """Select before each GMTS actor's mini-batch (or step): verl's worker methods wrapped
    (:func:`~gmts_core.integrations.verl_compat.replace_worker_methods`); idempotent."""
    compat.replace_worker_methods(apply_selection, worker_cls)


# ---- the registered losses -------------------------------------------------------------


def _gmts_policy_loss(mode: str) -> Callable[..., tuple[torch.Tensor, dict[str, Any]]]:
    def loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """verl's clipped PPO loss on advantages the GMTS selection already masked (module
        doc); ``actor/pg_clipfrac`` and ``actor/pg_clipfrac_lower`` over the selected tokens."""
        state = compat.STATE
        if state.selections == 0:
            raise RuntimeError(
                f"policy_loss.loss_mode={mode} but no GMTS selection ran in this process: the "
                "selection hook wraps verl.workers.engine_workers.TrainingWorker (verl 0.9.1's "
                "only actor worker, under both trainer.use_v1 settings), and this loss was "
                "called from somewhere else"
            )
        pg_loss, metrics = compat.core_algos.compute_policy_loss_vanilla(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode,
            config,
            rollout_is_weights,
        )
        selected = state.micro_selected
        if selected is None or selected.shape != response_mask.shape:
            selected = advantages != 0  # no mask carried: the tokens the policy term trains
        metrics.update(
            clip_fractions(
                old_log_prob, log_prob, advantages, response_mask.bool() & selected, config
            )
        )
        if state.last is not None:
            sel = state.last.selection.selected
            metrics["actor/gmts_selected_fraction"] = (
                float(sel.double().mean()) if sel.numel() else 0.0
            )
        return pg_loss, metrics

    loss.__name__ = f"compute_policy_loss_{mode}"
    return loss


def clip_fractions(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    selected: torch.Tensor,
    config: Any,
) -> dict[str, float]:
    """verl's ``actor/pg_clipfrac`` and ``actor/pg_clipfrac_lower`` (as
    ``compute_policy_loss_vanilla`` computes them) over the ``selected`` tokens only: an
    unselected token has no policy term, so it is neither clipped nor unclipped."""
    clip = config.clip_ratio
    low = config.clip_ratio_low if config.clip_ratio_low is not None else clip
    high = config.clip_ratio_high if config.clip_ratio_high is not None else clip
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0))
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    loss3 = -advantages * config.get("clip_ratio_c", 3.0)
    sel = selected.float()
    clipped_lower = torch.gt(torch.maximum(loss1, loss2), loss3) * (advantages < 0)
    return {
        "actor/pg_clipfrac": float(compat.masked_mean(torch.gt(loss2, loss1).float(), sel)),
        "actor/pg_clipfrac_lower": float(compat.masked_mean(clipped_lower.float(), sel)),
    }


for _mode in LOSS_MODES:
    compat.core_algos.register_policy_loss(_mode)(_gmts_policy_loss(_mode))

install_hook()
compat.replace_config_check(validate_actor_config)
