"""GMTS inside verl (0.9.x): four policy-loss modes and the hook that selects their tokens.

Importing this module (with :mod:`~gmts_core.integrations.verl_hook`, the only modules in
gmts_core that import verl) does two things in the process that imports it:

1. registers ``gmts``, ``gmts_entropy``, ``gmts_paper`` and ``gmts_paper_verl`` with
   ``verl.trainer.ppo.core_algos.register_policy_loss``, so
   ``actor_rollout_ref.actor.policy_loss.loss_mode=gmts_paper`` selects one of them;
2. installs the hook (:mod:`gmts_core.integrations.verl_hook`), which wraps verl's engine
   ``TrainingWorker.train_batch`` (one PPO mini-batch) and
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, register_policy_loss
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

from gmts_core.integrations import verl_hook
from gmts_core.integrations.verl_settings import gmts_settings, validate_actor_config
from gmts_core.integrations.verl_terms import (
    LOSS_MODES,
)
from gmts_core.knobs import DEFAULT_RATIO

logger = logging.getLogger(__name__)


@dataclass
class GMTSPolicyLossConfig(PolicyLossConfig):
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


def _wrap_actor_post_init(original: Callable[[Any], None]) -> Callable[[Any], None]:
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
        """verl's clipped PPO loss on advantages the GMTS hook already masked (module doc);
        ``actor/pg_clipfrac`` and ``actor/pg_clipfrac_lower`` over the selected tokens."""
        if verl_hook.STATE.selections == 0:
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
        selected = verl_hook.STATE.micro_selected
        if selected is None or selected.shape != response_mask.shape:
            selected = advantages != 0  # no mask carried: the tokens the policy term trains
        metrics.update(
            clip_fractions(
                old_log_prob, log_prob, advantages, response_mask.bool() & selected, config
            )
        )
        if verl_hook.STATE.last is not None:
            sel = verl_hook.STATE.last.selection.selected
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


verl_hook.install_hook()
install_config_check()
