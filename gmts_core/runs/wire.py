"""What crosses the pipe between a caller and a run-reading worker (:mod:`gmts_core.runs.worker`):
one JSON line each way. Step references, steps, the read limits and errors, out and back in
(an error comes back as the same class with its message as it was); orjson where installed."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - the library alone: the standard json
    orjson = None  # type: ignore[assignment]

from gmts_core.errors import GMTSError, InvalidInputError, LimitExceededError
from gmts_core.runs import errors as run_errors
from gmts_core.runs.base import RunGroup, RunStep, StepRef
from gmts_core.runs.limits import RunLimitError, RunLimits


def ref_out(ref: StepRef) -> list[Any]:
    return [ref.step, str(ref.path), ref.offset, ref.line, ref.last]


def ref_in(data: list[Any]) -> StepRef:
    step, path, offset, line, last = data
    return StepRef(int(step), Path(path), int(offset), int(line), bool(last))


def step_out(step: RunStep) -> dict[str, Any]:
    # shallow: json.dumps walks the lists itself (asdict's deep copy cost as much again)
    names = [f.name for f in fields(RunGroup)]
    groups = [{n: getattr(g, n) for n in names} for g in step.groups]
    return {"step": step.step, "source": step.source, "groups": groups, "notes": step.notes}


def step_in(data: dict[str, Any]) -> RunStep:
    names = {f.name for f in fields(RunGroup)}
    groups = []
    for g in data["groups"]:
        group = RunGroup(**{k: v for k, v in g.items() if k in names})
        for attr in ("rewards", "advantages"):  # orjson writes NaN (abstained) as null
            values = getattr(group, attr)
            if values is not None:
                setattr(group, attr, [math.nan if v is None else float(v) for v in values])
        groups.append(group)
    notes = [str(n) for n in data.get("notes", [])]
    return RunStep(int(data["step"]), groups, str(data["source"]), notes)


def dumps(value: Any) -> bytes:
    """One JSON line's bytes: orjson where installed (Gradio's dependency: the server has it;
    a logged step's per-token columns encode 10x faster), else the standard library."""
    if orjson is not None:
        return bytes(orjson.dumps(value, default=str))
    return json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")


def loads(data: bytes) -> Any:
    return orjson.loads(data) if orjson is not None else json.loads(data)


ERRORS: dict[str, type[GMTSError]] = {
    "run_format": run_errors.RunFormatError,
    "not_a_run": run_errors.NotARunError,
    "unsafe_run_format": run_errors.UnsafeRunFormatError,
    "unsafe_run_file": run_errors.UnsafeRunFileError,
    "run_limit_exceeded": RunLimitError,
    "limit_exceeded": LimitExceededError,
}


def error_out(exc: GMTSError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": exc.code, "message": str(exc)}
    for attr in ("path", "line", "limit", "value", "setting"):
        if hasattr(exc, attr):
            out[attr] = getattr(exc, attr)
    return out


def error_in(data: dict[str, Any]) -> GMTSError:
    """The child's error as the same class (its message as it was), else InvalidInputError."""
    cls = ERRORS.get(str(data.get("code")), InvalidInputError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(data.get("message", "")))
    for attr in ("path", "line", "limit", "value", "setting"):
        if attr in data:
            setattr(exc, attr, data[attr])
    return exc


def limits_out(limits: RunLimits) -> dict[str, Any]:
    return asdict(limits)
