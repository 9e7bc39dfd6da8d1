"""The hook that selects GMTS's tokens inside verl's training worker (imported by
:mod:`gmts_core.integrations.verl`, which installs it).

It wraps verl's engine ``TrainingWorker.train_batch`` (one PPO mini-batch) and
``train_mini_batch`` (one training step): when the actor's loss mode is a GMTS mode, the wrapper
first runs verl's own forward (``engine.infer_batch`` with ``calculate_entropy`` and
``calculate_sum_pi_squared``) at the current policy, selects per ``uid`` group with
:func:`gmts_core.integrations.verl_terms.select_tokens` over the rows of all data-parallel
ranks, and zeroes the advantage of every token left out; the mask also goes into the
mini-batch's field ``gmts_selected`` (:data:`SELECTED_FIELD`), which verl's micro-batching
carries with its rows and the loss reads (:data:`STATE`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from verl.utils import tensordict_utils as tu
from verl.workers import engine_workers
from verl.workers.utils.padding import no_padding_2_padding

from gmts_core.integrations.verl_log import VerlSelectionLog, row_texts, special_rows
from gmts_core.integrations.verl_settings import gmts_settings, loss_settings
from gmts_core.integrations.verl_terms import (
    LOSS_MODES,
    GMTSSettings,
    TokenBatch,
    TokenSelection,
    select_tokens,
)

_PADDED_FIELDS = ("response_mask", "old_log_probs", "advantages")

SELECTED_FIELD = "gmts_selected"  # 1 where the token is trained, in the advantages' layout


@dataclass
class HookState:
    """What the hook did in this process (the loss reads it; tests inspect it)."""

    selections: int = 0  # selections applied so far
    steps: int = 0  # train_mini_batch calls (verl's global step for a run from step 1)
    last: TokenSelection | None = None
    last_local_rows: tuple[int, int] = (0, 0)  # this rank's rows in ``last``: [start, stop)
    micro_selected: torch.Tensor | None = None  # the loss's micro-batch: selected (b, T) bool


STATE = HookState()


def _actor_config(worker: Any) -> Any | None:
    """The ActorConfig bound into the worker's loss function, if it is a GMTS actor."""
    config = getattr(getattr(worker, "loss_fn", None), "keywords", {}).get("config")
    policy_loss = getattr(config, "policy_loss", None)
    if policy_loss is None or policy_loss.get("loss_mode") not in LOSS_MODES:
        return None
    return config


def _engine_defaults(worker: Any) -> dict[str, Any]:
    """The micro-batching keys ``TrainingWorker.train_batch`` would inject (same values)."""
    ec, mc = worker.engine_config, worker.model_config
    return dict(
        use_remove_padding=mc.get("use_remove_padding", False),
        use_dynamic_bsz=ec.use_dynamic_bsz,
        max_token_len_per_gpu=ec.max_token_len_per_gpu,
        micro_batch_size_per_gpu=ec.micro_batch_size_per_gpu,
        use_fused_kernels=ec.use_fused_kernels,
    )


def current_token_stats(worker: Any, data: Any) -> dict[str, torch.Tensor]:
    """verl's own forward at the current policy: H, log pi and sum pi^2, padded (B, T) in the
    rows' order (verl's ``restore_dynamic_batch`` undoes its micro-batch reordering)."""
    probe = data.copy()
    for key, val in _engine_defaults(worker).items():
        if key not in probe.keys():
            tu.assign_non_tensor(probe, **{key: val})
    fused = bool(tu.get_non_tensor_data(probe, "use_fused_kernels", False))
    tu.assign_non_tensor(
        probe, calculate_entropy=True, calculate_sum_pi_squared=not fused, compute_loss=False
    )
    offload = bool(tu.get_non_tensor_data(data, "disable_auto_offload", False))
    with worker.engine.train_mode(disable_auto_offload=offload):  # as Framework2: train mode
        output = worker.engine.infer_batch(probe, loss_function=None)
    model_output = output["model_output"]
    stats = {
        "entropy": no_padding_2_padding(model_output["entropy"], data),
        "log_prob": no_padding_2_padding(model_output["log_probs"], data),
    }
    if "sum_pi_squared" in model_output:
        stats["sum_pi_squared"] = no_padding_2_padding(model_output["sum_pi_squared"], data)
    return stats


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


def apply_selection(worker: Any, data: Any, config: Any) -> TokenSelection:
    """Select the tokens of mini-batch ``data`` at the current policy and zero the advantage of
    the others in place; returns the selection of the whole (all-rank) mini-batch."""
    settings = gmts_settings(config.policy_loss)
    if "uid" not in data.keys():
        raise ValueError(
            "GMTS selects per group and needs verl's per-row 'uid' in the actor's batch"
        )
    stats = current_token_stats(worker, data)
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
    group = worker.engine.get_data_parallel_group()
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
        num_answers=tu.get_non_tensor_data(data, "global_batch_size", None),
        special=cat["special"].bool() if "special" in cat else None,
    )
    temperature = float(tu.get_non_tensor_data(data, "temperature", 1.0) or 1.0)
    vocab = int(getattr(getattr(worker.model_config, "hf_config", None), "vocab_size", 2) or 2)
    selection = select_tokens(
        batch,
        settings,
        loss_settings(config, temperature, vocab),
        config.policy_loss.get("gmts_seed", 0),
    )
    n_local = len(local["uid"])
    mask = selection.mask[start : start + n_local]  # (B_local, T_global)
    _write_selection(data, mask)
    STATE.selections += 1
    STATE.last, STATE.last_local_rows = selection, (start, start + n_local)
    if log_dir and rank == 0:
        _log_selection(
            worker,
            log_dir,
            settings,
            selection,
            cat["responses"],
            [t for p in parts for t in p["texts"]],
        )
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
        data[SELECTED_FIELD] = torch.nested.as_nested_tensor(keep, layout=torch.jagged)
    else:
        keep_padded = mask[:, : adv.shape[1]].to(adv.device, adv.dtype)
        data["advantages"] = adv * keep_padded
        data[SELECTED_FIELD] = keep_padded


def _log_selection(
    worker: Any,
    log_dir: str,
    settings: GMTSSettings,
    selection: TokenSelection,
    responses: torch.Tensor,
    texts: list[tuple[str, str]],
) -> None:
    log = getattr(worker, "_gmts_log", None)
    if log is None:
        log = worker._gmts_log = VerlSelectionLog(log_dir, settings.ratio, settings.scope)
    log.record(selection, responses, texts)


def _micro_batch_selected(data: Any) -> torch.Tensor | None:
    """The padded (b, T) ``gmts_selected`` of a micro-batch, if it carries one."""
    if data is None or not hasattr(data, "keys") or SELECTED_FIELD not in data.keys():
        return None
    return data.select(SELECTED_FIELD).to_padded_tensor()[SELECTED_FIELD] != 0


def _reading_selection(loss_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``loss_fn`` that first hands its micro-batch's selection to the registered loss."""

    @functools.wraps(loss_fn)
    def loss(*args: Any, **kwargs: Any) -> Any:
        STATE.micro_selected = _micro_batch_selected(kwargs.get("data"))
        try:
            return loss_fn(*args, **kwargs)
        finally:
            STATE.micro_selected = None

    return loss


def _wrap_train_batch(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def train_batch(self: Any, data: Any) -> Any:
        config = _actor_config(self)
        if config is None:
            return original(self, data)
        if gmts_settings(config.policy_loss).reselect == "mini_batch":
            apply_selection(self, data, config)
        loss_fn = self.loss_fn
        self.loss_fn = _reading_selection(loss_fn)
        try:
            return original(self, data)
        finally:
            self.loss_fn = loss_fn

    train_batch._gmts_wrapped = True  # type: ignore[attr-defined]
    return train_batch


def _wrap_train_mini_batch(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def train_mini_batch(self: Any, data: Any) -> Any:
        config = _actor_config(self)
        if config is not None:
            STATE.steps += 1
            if gmts_settings(config.policy_loss).reselect == "step":
                apply_selection(self, data, config)
        output = original(self, data)
        log = getattr(self, "_gmts_log", None)
        if log is not None:
            log.flush(STATE.steps)
        return output

    train_mini_batch._gmts_wrapped = True  # type: ignore[attr-defined]
    return train_mini_batch


def install_hook(worker_cls: Any = engine_workers.TrainingWorker) -> None:
    """Wrap ``worker_cls.train_batch`` and ``train_mini_batch`` (idempotent)."""
    if not getattr(worker_cls.train_batch, "_gmts_wrapped", False):
        worker_cls.train_batch = _wrap_train_batch(worker_cls.train_batch)
    if not getattr(worker_cls.train_mini_batch, "_gmts_wrapped", False):
        worker_cls.train_mini_batch = _wrap_train_mini_batch(worker_cls.train_mini_batch)
