"""Every part of verl that GMTS relies on and verl does not promise to keep, in one place,
checked when this module is imported; with the method replacements and the process state they
need.

verl has no hook for selecting tokens before its actor's loss, so the integration
(:mod:`gmts_core.integrations.verl`) replaces, once per process:

- ``TrainingWorker.train_batch`` (one PPO mini-batch) and ``TrainingWorker.train_mini_batch``
  (one training step) of ``verl.workers.engine_workers`` (:func:`replace_worker_methods`): when
  the actor's loss mode is a GMTS mode, the selection runs first and the worker's ``loss_fn``
  (a ``functools.partial`` whose ``config`` keyword is the actor config) is wrapped to hand each
  micro-batch's selection to the registered loss (:data:`STATE`);
- ``ActorConfig.__post_init__`` (:func:`replace_config_check`), so a config GMTS cannot train is
  refused when verl builds it.

It reads from verl's engine: ``engine.infer_batch`` with ``calculate_entropy`` and
``calculate_sum_pi_squared`` inside ``engine.train_mode`` (:func:`current_token_stats`),
``engine.get_data_parallel_group``, the worker's ``engine_config`` and ``model_config``
(micro-batching keys, tokenizer, vocabulary size), the batch's non-tensor settings
(``tensordict_utils``) and ``no_padding_2_padding``.

On import the installed verl must be in :data:`VERL_RELEASES` (the release the suite runs on,
``requirements-verl.txt``) and have every name above (:data:`REQUIRED`); otherwise
:class:`~gmts_core.integrations.releases.UnsupportedReleaseError` names the installed release
and the range, at import rather than inside a worker mid-run.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import verl

from gmts_core.integrations.releases import ReleaseRange
from gmts_core.integrations.verl_selection import LOSS_MODES, TokenSelection, gmts_settings

VERL_RELEASES = ReleaseRange("verl", floor="0.9.1", below="0.10", tested=("0.9.1",))

# module -> (object in it or "", the names GMTS uses there)
REQUIRED: dict[str, tuple[str, tuple[str, ...]]] = {
    "verl.workers.engine_workers": ("TrainingWorker", ("train_batch", "train_mini_batch")),
    "verl.workers.config.actor": ("ActorConfig", ("__post_init__",)),
    "verl.workers.config": ("", ("ActorConfig", "PolicyLossConfig")),
    "verl.trainer.ppo.core_algos": ("", ("register_policy_loss", "compute_policy_loss_vanilla")),
    "verl.utils.tensordict_utils": ("", ("assign_non_tensor", "get_non_tensor_data")),
    "verl.utils.torch_functional": ("", ("masked_mean",)),
    "verl.workers.utils.padding": ("", ("no_padding_2_padding",)),
}


def check_verl(version: str) -> dict[str, Any]:
    """Refuse a verl release outside :data:`VERL_RELEASES`, or one lacking a name of
    :data:`REQUIRED`; returns the modules of :data:`REQUIRED` by name."""
    VERL_RELEASES.check(version)
    modules: dict[str, Any] = {}
    for name, (owner, names) in REQUIRED.items():
        try:
            modules[name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise  # one of verl's own dependencies is missing: its own error
            raise VERL_RELEASES.lacking(version, f"the module {name}") from exc
        target = getattr(modules[name], owner, None) if owner else modules[name]
        where = f"{name}.{owner}" if owner else name
        VERL_RELEASES.require(version, where, target, names)
    return modules


_MODULES = check_verl(verl.__version__)
_tu = _MODULES["verl.utils.tensordict_utils"]
core_algos = _MODULES["verl.trainer.ppo.core_algos"]
masked_mean = _MODULES["verl.utils.torch_functional"].masked_mean
no_padding_2_padding = _MODULES["verl.workers.utils.padding"].no_padding_2_padding
ActorConfig = _MODULES["verl.workers.config"].ActorConfig
PolicyLossConfig = _MODULES["verl.workers.config"].PolicyLossConfig
TrainingWorker = _MODULES["verl.workers.engine_workers"].TrainingWorker

SELECTED_FIELD = "gmts_selected"  # 1 where the token is trained, in the advantages' layout


@dataclass
class HookState:
    """What the GMTS selection did in this process (the loss reads it; tests inspect it)."""

    selections: int = 0  # selections applied so far
    steps: int = 0  # train_mini_batch calls (verl's global step for a run from step 1)
    last: TokenSelection | None = None
    last_local_rows: tuple[int, int] = (0, 0)  # this rank's rows in ``last``: [start, stop)
    micro_selected: torch.Tensor | None = None  # the loss's micro-batch: selected (b, T) bool


STATE = HookState()  # one per process: verl runs one actor worker per process


# ---- reading verl's worker and batch -------------------------------------------------------


def actor_config(worker: Any) -> Any | None:
    """The ActorConfig bound into the worker's loss function, if it is a GMTS actor."""
    config = getattr(getattr(worker, "loss_fn", None), "keywords", {}).get("config")
    policy_loss = getattr(config, "policy_loss", None)
    if policy_loss is None or policy_loss.get("loss_mode") not in LOSS_MODES:
        return None
    return config


def engine_defaults(worker: Any) -> dict[str, Any]:
    """The micro-batching keys ``TrainingWorker.train_batch`` would inject (same values)."""
    ec, mc = worker.engine_config, worker.model_config
    return dict(
        use_remove_padding=mc.get("use_remove_padding", False),
        use_dynamic_bsz=ec.use_dynamic_bsz,
        max_token_len_per_gpu=ec.max_token_len_per_gpu,
        micro_batch_size_per_gpu=ec.micro_batch_size_per_gpu,
        use_fused_kernels=ec.use_fused_kernels,
    )


def batch_setting(data: Any, key: str, default: Any) -> Any:
    """A non-tensor setting verl carries in the batch (``temperature``, ``global_batch_size``)."""
    return _tu.get_non_tensor_data(data, key, default)


def current_token_stats(worker: Any, data: Any) -> dict[str, torch.Tensor]:
    """verl's own forward at the current policy: H, log pi and sum pi^2, padded (B, T) in the
    rows' order (verl's ``restore_dynamic_batch`` undoes its micro-batch reordering)."""
    probe = data.copy()
    for key, val in engine_defaults(worker).items():
        if key not in probe.keys():
            _tu.assign_non_tensor(probe, **{key: val})
    fused = bool(_tu.get_non_tensor_data(probe, "use_fused_kernels", False))
    _tu.assign_non_tensor(
        probe, calculate_entropy=True, calculate_sum_pi_squared=not fused, compute_loss=False
    )
    offload = bool(_tu.get_non_tensor_data(data, "disable_auto_offload", False))
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


def data_parallel_group(worker: Any) -> Any:
    """The process group of the actor's data-parallel ranks."""
    return worker.engine.get_data_parallel_group()


def vocab_size(worker: Any) -> int:
    """The model's vocabulary size from its Hugging Face config (2 where unknown)."""
    return int(getattr(getattr(worker.model_config, "hf_config", None), "vocab_size", 2) or 2)


def tokenizer(worker: Any) -> Any:
    """The actor's tokenizer (a processor's own tokenizer)."""
    tok = worker.model_config.tokenizer
    return getattr(tok, "tokenizer", tok)


def worker_log(worker: Any, make: Callable[[], Any]) -> Any:
    """The token log this worker keeps across its steps (made by ``make`` at first use)."""
    log = getattr(worker, "_gmts_log", None)
    if log is None:
        log = worker._gmts_log = make()
    return log


# ---- the method replacements ---------------------------------------------------------------


SelectFn = Callable[[Any, Any, Any], Any]  # (worker, mini-batch, actor config)


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


def _wrap_train_batch(original: Callable[..., Any], select: SelectFn) -> Callable[..., Any]:
    @functools.wraps(original)
    def train_batch(self: Any, data: Any) -> Any:
        config = actor_config(self)
        if config is None:
            return original(self, data)
        if gmts_settings(config.policy_loss).reselect == "mini_batch":
            select(self, data, config)
        loss_fn = self.loss_fn
        self.loss_fn = _reading_selection(loss_fn)
        try:
            return original(self, data)
        finally:
            self.loss_fn = loss_fn

    train_batch._gmts_wrapped = True  # type: ignore[attr-defined]
    return train_batch


def _wrap_train_mini_batch(original: Callable[..., Any], select: SelectFn) -> Callable[..., Any]:
    @functools.wraps(original)
    def train_mini_batch(self: Any, data: Any) -> Any:
        config = actor_config(self)
        if config is not None:
            STATE.steps += 1
            if gmts_settings(config.policy_loss).reselect == "step":
                select(self, data, config)
        output = original(self, data)
        log = getattr(self, "_gmts_log", None)
        if log is not None:
            log.flush(STATE.steps)
        return output

    train_mini_batch._gmts_wrapped = True  # type: ignore[attr-defined]
    return train_mini_batch


def replace_worker_methods(select: SelectFn, worker_cls: Any = TrainingWorker) -> None:
    """Wrap ``worker_cls.train_batch`` (``select`` before a GMTS actor's mini-batch, at the
    current policy) and ``train_mini_batch`` (``select`` once per step with
    ``gmts_reselect=step``; the step's token log written after it); idempotent."""
    if not getattr(worker_cls.train_batch, "_gmts_wrapped", False):
        worker_cls.train_batch = _wrap_train_batch(worker_cls.train_batch, select)
    if not getattr(worker_cls.train_mini_batch, "_gmts_wrapped", False):
        worker_cls.train_mini_batch = _wrap_train_mini_batch(worker_cls.train_mini_batch, select)


def replace_config_check(check: Callable[[Any], None], config_cls: Any = ActorConfig) -> None:
    """Wrap ``config_cls.__post_init__`` with ``check`` for a GMTS actor (idempotent); verl's
    FSDP, Megatron, VeOmni and TorchTitan actor configs call it through ``super()``."""
    original = config_cls.__post_init__
    if getattr(original, "_gmts_wrapped", False):
        return

    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        original(self)
        policy_loss = getattr(self, "policy_loss", None)
        if policy_loss is not None and policy_loss.get("loss_mode") in LOSS_MODES:
            check(self)

    __post_init__._gmts_wrapped = True  # type: ignore[attr-defined]
    config_cls.__post_init__ = __post_init__
