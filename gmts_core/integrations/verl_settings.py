"""The GMTS settings read from verl's actor config, and its check (verl-free: the configs are
read by key, so these run and are tested without verl).

:func:`gmts_settings` reads ``policy_loss.gmts_*`` (defaults where a plain config has none),
:func:`loss_settings` the clip range, dual clip, KL weight and aggregation, and
:func:`validate_actor_config` refuses a config GMTS cannot train exactly."""

from __future__ import annotations

from typing import Any

from gmts_core.errors import InvalidInputError
from gmts_core.integrations.verl_terms import (
    K3_TYPES,
    GMTSSettings,
    LossSettings,
    check_aggregation,
    method_for_loss_mode,
)
from gmts_core.knobs import DEFAULT_RATIO
from gmts_core.methods.coefficient import ClipSettings


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
