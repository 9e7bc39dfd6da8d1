"""GMTS inside verl (0.9.x): four policy-loss modes and the hook that selects their tokens.

Importing this module (the only one in gmts_core that imports verl) does two things in the
process that imports it:

1. registers ``gmts``, ``gmts_entropy``, ``gmts_paper`` and ``gmts_paper_verl`` with
   ``verl.trainer.ppo.core_algos.register_policy_loss``, so
   ``actor_rollout_ref.actor.policy_loss.loss_mode=gmts_paper`` selects one of them;
2. wraps verl's engine ``TrainingWorker.train_batch`` (one PPO mini-batch) and
   ``train_mini_batch`` (one training step): when the actor's loss mode is a GMTS mode, the
   wrapper first runs verl's own forward (``engine.infer_batch`` with ``calculate_entropy``
   and ``calculate_sum_pi_squared``: verl computes H and sum pi^2 with its own kernels) at the
   current policy, selects per ``uid`` group with :func:`gmts_core.integrations.verl_terms.
   select_tokens` over the rows of all data-parallel ranks, and zeroes the advantage of every
   token left out -- as the paper's Framework2 does. The registered loss is then verl's own
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
``validate_config`` builds it before any worker starts): :func:`validate_actor_config`.

verl imports the module in its workers through the policy-loss config's ``_target_``
(:class:`GMTSPolicyLossConfig`, which also carries the GMTS settings)::

    actor_rollout_ref.actor.policy_loss._target_=gmts_core.integrations.verl.GMTSPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=gmts_paper_verl
    +actor_rollout_ref.actor.policy_loss.gmts_ratio=0.2

and, when ``gmts_log_dir`` is set (e.g. ``${trainer.rollout_data_dir}``), the first
data-parallel rank writes every selection to ``gmts_log_dir/gmts_selection/
selection_{step:05d}.parquet`` (:mod:`gmts_core.integrations.verl_log`), which the Runs tab
opens as the token log of what was trained.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import torch
import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, register_policy_loss
from verl.utils import tensordict_utils as tu
from verl.workers import engine_workers
from verl.workers.config.actor import ActorConfig, PolicyLossConfig
from verl.workers.utils.padding import no_padding_2_padding

from gmts_core.errors import InvalidInputError
from gmts_core.integrations.verl_log import VerlSelectionLog, row_texts
from gmts_core.integrations.verl_terms import (
    K3_TYPES,
    LOSS_MODES,
    GMTSSettings,
    LossSettings,
    TokenBatch,
    TokenSelection,
    check_aggregation,
    method_for_loss_mode,
    select_tokens,
)
from gmts_core.methods.coefficient import ClipSettings

logger = logging.getLogger(__name__)

_PADDED_FIELDS = ("response_mask", "old_log_probs", "advantages")
SELECTED_FIELD = "gmts_selected"  # 1 where the token is trained, in the advantages' layout


@dataclass
class GMTSPolicyLossConfig(PolicyLossConfig):
    """verl's policy-loss config plus the GMTS settings (``policy_loss.gmts_*``)."""

    gmts_ratio: float = 0.2  # k = ceil(ratio * n) tokens kept per scope (20%: the paper)
    gmts_scope: str = "group"  # "group" (one uid), "batch" (the mini-batch) or "answer"
    gmts_reselect: str = "mini_batch"  # "mini_batch": at the current policy; "step": once
    gmts_log_dir: str | None = None  # write gmts_selection/selection_NNNNN.parquet here
    gmts_seed: int = 0  # for the random control only

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        if self.loss_mode in LOSS_MODES:
            gmts_settings(self)  # raises InvalidInputError on a bad ratio, scope or reselect


@dataclass
class HookState:
    """What the hook did in this process (the loss reads it; tests inspect it)."""

    selections: int = 0  # selections applied so far
    steps: int = 0  # train_mini_batch calls (verl's global step for a run from step 1)
    last: TokenSelection | None = None
    last_local_rows: tuple[int, int] = (0, 0)  # this rank's rows in ``last``: [start, stop)
    micro_selected: torch.Tensor | None = None  # the loss's micro-batch: selected (b, T) bool


STATE = HookState()


def gmts_settings(policy_loss: Any) -> GMTSSettings:
    """The GMTS settings of a policy-loss config (defaults where a plain config has none)."""
    return GMTSSettings(
        method=method_for_loss_mode(policy_loss.get("loss_mode")),
        ratio=float(policy_loss.get("gmts_ratio", 0.2)),
        scope=str(policy_loss.get("gmts_scope", "group")),
        reselect=str(policy_loss.get("gmts_reselect", "mini_batch")),
    )


def validate_actor_config(config: Any) -> None:
    """Refuse, when the config is built, an actor config GMTS cannot train exactly: bad GMTS
    settings, an aggregation whose weights depend on the micro-batching
    (:func:`~gmts_core.integrations.verl_terms.check_aggregation`) or a KL estimator other
    than k3. Raises :class:`~gmts_core.errors.InvalidInputError` (a ``ValueError``)."""
    gmts_settings(config.policy_loss)
    check_aggregation(
        config.get("loss_agg_mode", "token-mean"), config.get("loss_scale_factor", None)
    )
    beta = float(config.get("kl_loss_coef", 0.0)) if config.get("use_kl_loss", False) else 0.0
    if beta != 0.0 and config.get("kl_loss_type", "low_var_kl") not in K3_TYPES:
        raise InvalidInputError(
            f"GMTS's coefficient has the k3 KL term; kl_loss_type {config.get('kl_loss_type')!r} "
            f"is not supported (supported: {', '.join(K3_TYPES)})"
        )


def _wrap_actor_post_init(original):  # type: ignore[no-untyped-def]
    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        original(self)
        policy_loss = getattr(self, "policy_loss", None)
        if policy_loss is not None and policy_loss.get("loss_mode") in LOSS_MODES:
            validate_actor_config(self)

    __post_init__._gmts_wrapped = True  # type: ignore[attr-defined]
    return __post_init__


def install_config_check(config_cls: Any = ActorConfig) -> None:
    """Wrap ``config_cls.__post_init__`` with :func:`validate_actor_config` (idempotent); verl's
    FSDP, Megatron, VeOmni and TorchTitan actor configs call it through ``super()``."""
    if not getattr(config_cls.__post_init__, "_gmts_wrapped", False):
        config_cls.__post_init__ = _wrap_actor_post_init(config_cls.__post_init__)


def loss_settings(config: Any, temperature: float, vocab_size: int) -> LossSettings:
    """Clip range, dual clip, KL weight and aggregation of verl's actor config."""
    clip = config.get("clip_ratio", 0.2)
    low = config.get("clip_ratio_low") if config.get("clip_ratio_low") is not None else clip
    high = config.get("clip_ratio_high") if config.get("clip_ratio_high") is not None else clip
    beta = float(config.get("kl_loss_coef", 0.0)) if config.get("use_kl_loss", False) else 0.0
    if beta != 0.0 and config.get("kl_loss_type", "low_var_kl") not in K3_TYPES:
        raise ValueError(
            f"GMTS's coefficient has the k3 KL term; kl_loss_type {config.get('kl_loss_type')!r} "
            f"is not supported (supported: {', '.join(K3_TYPES)})"
        )
    return LossSettings(
        clip=ClipSettings(
            float(low), float(high), beta, delta=float(config.get("clip_ratio_c", 3.0))
        ),
        loss_agg_mode=config.get("loss_agg_mode", "token-mean"),
        loss_scale_factor=config.get("loss_scale_factor", None),
        temperature=temperature,
        vocab_size=vocab_size,
    )


# ---- the registered losses -------------------------------------------------------------


def _gmts_policy_loss(mode: str):  # type: ignore[no-untyped-def]
    def loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """verl's clipped PPO loss on advantages the GMTS hook already masked (module doc);
        ``actor/pg_clipfrac`` and ``actor/pg_clipfrac_lower`` over the selected tokens."""
        if STATE.selections == 0:
            raise RuntimeError(
                f"policy_loss.loss_mode={mode} but no GMTS selection ran in this process: the "
                "selection hook wraps verl.workers.engine_workers.TrainingWorker (verl 0.9.1's "
                "only actor worker, under both trainer.use_v1 settings), and this loss was "
                "called from somewhere else"
            )
        pg_loss, metrics = compute_policy_loss_vanilla(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode,
            config,
            rollout_is_weights,
        )
        selected = STATE.micro_selected
        if selected is None or selected.shape != response_mask.shape:
            selected = advantages != 0  # no mask carried: the tokens the policy term trains
        metrics.update(
            clip_fractions(
                old_log_prob, log_prob, advantages, response_mask.bool() & selected, config
            )
        )
        if STATE.last is not None:
            sel = STATE.last.selection.selected
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
        "actor/pg_clipfrac": float(verl_F.masked_mean(torch.gt(loss2, loss1).float(), sel)),
        "actor/pg_clipfrac_lower": float(verl_F.masked_mean(clipped_lower.float(), sel)),
    }


for _mode in LOSS_MODES:
    register_policy_loss(_mode)(_gmts_policy_loss(_mode))


# ---- the hook --------------------------------------------------------------------------


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


def _reading_selection(loss_fn):  # type: ignore[no-untyped-def]
    """``loss_fn`` that first hands its micro-batch's selection to the registered loss."""

    @functools.wraps(loss_fn)
    def loss(*args: Any, **kwargs: Any) -> Any:
        STATE.micro_selected = _micro_batch_selected(kwargs.get("data"))
        try:
            return loss_fn(*args, **kwargs)
        finally:
            STATE.micro_selected = None

    return loss


def _wrap_train_batch(original):  # type: ignore[no-untyped-def]
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


def _wrap_train_mini_batch(original):  # type: ignore[no-untyped-def]
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


install_hook()
install_config_check()
