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
written last (to a temporary file, then renamed) and names the tensor files it belongs to with
their sha256, and carries the sha256 of its own content, so a process killed mid-save leaves the
previous complete state and any later damage (a truncated or zeroed file, a hand-edited field) is
found before anything is parsed: :func:`check_saved` and :func:`load_session` raise
:class:`CorruptSessionError` naming what is wrong, and the caller moves the folder aside.
The weights restore bit-for-bit: the policy is rebuilt from the base model exactly as it was
made (same LoRA seed), then its trainable tensors are overwritten with the saved ones; step
``n`` draws its seed from ``(seed, n)``, so the next step after a restore is the step the
session would have run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from gmts_core.bounds import MAX_SEED
from gmts_core.config import RLConfig
from gmts_core.experiments.evaluation import EvalResult
from gmts_core.experiments.sessions import Session, SessionEvaluation
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.records import StepMetrics
from gmts_core.model.loading import LoadedModel

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: sha256 of every file in meta.json
META = "meta.json"
MAX_META_BYTES = 64 * 2**20  # the step history of a long session is a few MB


class CorruptSessionError(ValueError):
    """A saved session's files are damaged or do not fit together (the reason says which)."""


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


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with _open_regular(path) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _meta_digest(meta: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``meta`` without its own digest."""
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _open_regular(path: Path) -> Any:
    """``path`` opened for reading only if it is a regular file (never a FIFO, a device or a
    link: opening one of those could block or read outside the folder)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CorruptSessionError(f"{path.name} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
        "checksums": {name: _sha256_file(folder / name) for name in (weights_file, optimizer_file)},
        "extra": extra or {},
    }
    meta["sha256"] = _meta_digest(meta)
    _write_json(folder / META, meta)
    keep = {weights_file, optimizer_file, META}
    for old in folder.iterdir():
        if old.name not in keep and old.suffix in (".safetensors", ".tmp"):
            old.unlink(missing_ok=True)


def _field(meta: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = meta.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise CorruptSessionError(f"meta.json: {name} is {type(value).__name__}")
    return value


def _bounded_int(meta: dict[str, Any], name: str, hi: int) -> int:
    value = _field(meta, name, int)
    if not 0 <= value <= hi:
        raise CorruptSessionError(f"meta.json: {name} is out of range [0, {hi}]")
    return int(value)


def _finite(meta: dict[str, Any], name: str) -> float:
    value = _field(meta, name, (int, float))
    try:
        number = float(value)
    except OverflowError:  # an integer no float holds
        number = math.inf
    if not math.isfinite(number):
        raise CorruptSessionError(f"meta.json: {name} is not a finite number")
    return number


def check_saved(folder: Path) -> SavedSession:
    """The saved session in ``folder``, its ``meta.json`` checked (size, JSON, format version,
    its own sha256, the types of the fields read here); CorruptSessionError says what is wrong.
    The tensor files are checked by :func:`load_session`."""
    try:
        with _open_regular(folder / META) as f:
            raw = f.read(MAX_META_BYTES + 1)
    except OSError as exc:
        raise CorruptSessionError(f"meta.json cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_META_BYTES:
        raise CorruptSessionError(f"meta.json is over {MAX_META_BYTES} bytes")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptSessionError(f"meta.json is not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise CorruptSessionError("meta.json is not a JSON object")
    if meta.get("version") != FORMAT_VERSION:
        raise CorruptSessionError(f"state format {meta.get('version')!r}, not {FORMAT_VERSION}")
    if meta.get("sha256") != _meta_digest(meta):
        raise CorruptSessionError("meta.json does not match its checksum (edited or damaged)")
    for name, kind in (("policy", dict), ("config", dict), ("history", list)):
        _field(meta, name, kind)
    _field(meta, "evaluations", list)
    _field(meta, "optimizer", dict)
    files, sums = _field(meta, "files", dict), _field(meta, "checksums", dict)
    for part in ("weights", "optimizer"):
        name = files.get(part)
        if not isinstance(name, str) or Path(name).name != name or name not in sums:
            raise CorruptSessionError(f"meta.json: files.{part} is not a file of the folder")
    extra = meta.get("extra")
    _bounded_int(meta, "seed", MAX_SEED)
    return SavedSession(
        folder,
        str(_field(meta, "session_id", str)),
        _finite(meta, "saved_at"),
        _bounded_int(meta, "steps_done", 2**53),
        dict(extra) if isinstance(extra, dict) else {},
        meta,
    )


def _checked_tensors(saved: SavedSession, part: str) -> dict[str, torch.Tensor]:
    """The tensors of ``files[part]``, after its sha256 matched the one in meta.json."""
    name = saved.meta["files"][part]
    path = saved.folder / name
    try:
        digest = _sha256_file(path)
    except OSError as exc:
        raise CorruptSessionError(f"{name} cannot be read: {exc.strerror or exc}") from None
    if digest != saved.meta["checksums"][name]:
        raise CorruptSessionError(f"{name} does not match its checksum (truncated or damaged)")
    return load_file(str(path))


def load_session(saved: SavedSession, base: LoadedModel, now: float = 0.0) -> Session:
    """Rebuild the session saved in ``saved.folder`` on its base model ``base``; a file that
    fails its checksum or a state that does not fit the policy is a CorruptSessionError."""
    try:
        return _load_session(saved, base, now)
    except CorruptSessionError:
        raise
    except MemoryError:  # the server's trouble, not the state's
        raise
    # whatever a checked state still gets wrong (a field of the wrong shape, a tensor that
    # does not fit, a file safetensors cannot parse although its checksum matches), the
    # session cannot be rebuilt: one error type for the caller, never a 500
    except Exception as exc:
        raise CorruptSessionError(f"the state does not fit together: {exc!r}"[:500]) from None


def _load_session(saved: SavedSession, base: LoadedModel, now: float) -> Session:
    meta = saved.meta
    settings = _dataclass_from(PolicySettings, meta["policy"])
    policy = TrainablePolicy(base, settings)
    weights = _checked_tensors(saved, "weights")
    named = dict(policy.model.named_parameters())
    missing = sorted(set(weights) ^ {n for n, p in named.items() if p.requires_grad})
    if missing:
        raise CorruptSessionError(f"saved weights do not fit the policy: {missing[:5]}")
    with torch.no_grad():
        for name, tensor in weights.items():
            named[name].copy_(tensor)
    config = _dataclass_from(RLConfig, meta["config"])
    config.validate()
    session = Session(saved.session_id, policy, config, int(meta["seed"]), now, now)
    session.history = [_dataclass_from(StepMetrics, m) for m in meta["history"]]
    session.evaluations = [
        SessionEvaluation(int(e["step"]), _dataclass_from(EvalResult, e["result"]))
        for e in meta["evaluations"]
    ]
    _load_optimizer(session.optimizer, _checked_tensors(saved, "optimizer"), meta["optimizer"])
    return session


def _load_optimizer(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], opt_meta: dict
) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = tensor
    for index, values in opt_meta.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(values)
    optimizer.load_state_dict({"state": state, "param_groups": opt_meta["param_groups"]})
