"""A session's state on disk, so that a restarted server continues it where it was.

One folder per session holds:

- ``weights-<n>.safetensors``: the trainable tensors after ``n`` steps (a full copy: every
  trainable parameter; LoRA: the adapter's), by parameter name;
- ``optimizer-<n>.safetensors``: the optimizer's per-parameter tensors (AdamW's ``step``,
  ``exp_avg``, ``exp_avg_sq``) as ``<index>.<name>``;
- ``meta.json``: everything else as JSON: the policy settings, the RL config, the seed, the
  step history and evaluations, the optimizer's hyper-parameters, the caller's ``extra``
  (e.g. which model to load) and the wall-clock time of the save.

Tensors are safetensors and the rest JSON: nothing is ever unpickled. ``meta.json`` is
written last (to a temporary file, then renamed) and names the tensor files it belongs to, so a
process killed mid-save leaves the previous complete state. The weights restore bit-for-bit:
the policy is rebuilt from the base model exactly as it was made (same LoRA seed), then its
trainable tensors are overwritten with the saved ones; step ``n`` draws its seed from
``(seed, n)``, so the next step after a restore is the step the session would have run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from gmts_core.config import RLConfig
from gmts_core.experiments.evaluation import EvalResult
from gmts_core.experiments.sessions import Session, SessionEvaluation
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.records import StepMetrics
from gmts_core.modeling import LoadedModel

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
META = "meta.json"


@dataclass(frozen=True)
class SavedSession:
    """What ``meta.json`` says about a saved session, read without loading any tensor."""

    folder: Path
    session_id: str
    saved_at: float  # wall-clock seconds (time.time) of the save
    steps_done: int
    extra: dict[str, Any]
    meta: dict[str, Any]


def _dataclass_from(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)`` with JSON lists turned back into the tuples the defaults use."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in values.items():
        if name not in known:
            continue
        default = known[name].default
        kwargs[name] = (
            tuple(value) if isinstance(default, tuple) and isinstance(value, list) else value
        )
    return cls(**kwargs)


def _optimizer_parts(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """The optimizer's tensors (``<index>.<name>``) and its JSON part."""
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            elif value is not None:
                scalars.setdefault(str(index), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_session(session: Session, folder: Path, extra: dict[str, Any] | None = None) -> None:
    """Write ``session``'s state into ``folder`` (created if needed); the previous state stays
    valid until the new ``meta.json`` replaces it."""
    folder.mkdir(parents=True, exist_ok=True)
    n = session.steps_done
    stamp = f"{n}-{time.time_ns()}"
    weights = {
        name: p.detach().cpu().contiguous()
        for name, p in session.policy.model.named_parameters()
        if p.requires_grad
    }
    opt_tensors, opt_meta = _optimizer_parts(session.optimizer)
    weights_file, optimizer_file = f"weights-{stamp}.safetensors", f"optimizer-{stamp}.safetensors"
    save_file(weights, str(folder / weights_file))
    save_file(opt_tensors, str(folder / optimizer_file))
    meta = {
        "version": FORMAT_VERSION,
        "session_id": session.id,
        "saved_at": time.time(),
        "seed": session.seed,
        "steps_done": n,
        "policy": dataclasses.asdict(session.policy.settings),
        "policy_kind": session.policy.kind,
        "config": dataclasses.asdict(session.config),
        "history": [dataclasses.asdict(m) for m in session.history],
        "evaluations": [
            {"step": e.step, "result": dataclasses.asdict(e.result)} for e in session.evaluations
        ],
        "optimizer": opt_meta,
        "files": {"weights": weights_file, "optimizer": optimizer_file},
        "extra": extra or {},
    }
    _write_json(folder / META, meta)
    keep = {weights_file, optimizer_file, META}
    for old in folder.iterdir():
        if old.name not in keep and old.suffix in (".safetensors", ".tmp"):
            old.unlink(missing_ok=True)


def read_saved(folder: Path) -> SavedSession | None:
    """The saved session in ``folder`` (None when there is none or it cannot be read)."""
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
        if meta.get("version") != FORMAT_VERSION:
            raise ValueError(f"state format {meta.get('version')!r}, not {FORMAT_VERSION}")
        return SavedSession(
            folder,
            str(meta["session_id"]),
            float(meta["saved_at"]),
            int(meta["steps_done"]),
            dict(meta.get("extra") or {}),
            meta,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("cannot read the session state in %s: %s", folder, exc)
        return None


def load_session(saved: SavedSession, base: LoadedModel, now: float = 0.0) -> Session:
    """Rebuild the session saved in ``saved.folder`` on its base model ``base``."""
    meta = saved.meta
    settings = _dataclass_from(PolicySettings, meta["policy"])
    policy = TrainablePolicy(base, settings)
    weights = load_file(str(saved.folder / meta["files"]["weights"]))
    named = dict(policy.model.named_parameters())
    missing = sorted(set(weights) ^ {n for n, p in named.items() if p.requires_grad})
    if missing:
        raise ValueError(f"saved weights do not fit the policy: {missing[:5]}")
    with torch.no_grad():
        for name, tensor in weights.items():
            named[name].copy_(tensor)
    config = _dataclass_from(RLConfig, meta["config"])
    session = Session(saved.session_id, policy, config, int(meta["seed"]), now, now)
    session.history = [_dataclass_from(StepMetrics, m) for m in meta["history"]]
    session.evaluations = [
        SessionEvaluation(int(e["step"]), _dataclass_from(EvalResult, e["result"]))
        for e in meta["evaluations"]
    ]
    _load_optimizer(session.optimizer, saved.folder / meta["files"]["optimizer"], meta["optimizer"])
    return session


def _load_optimizer(optimizer: torch.optim.Optimizer, path: Path, opt_meta: dict) -> None:
    tensors = load_file(str(path))
    state: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = tensor
    for index, values in opt_meta.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(values)
    optimizer.load_state_dict({"state": state, "param_groups": opt_meta["param_groups"]})
