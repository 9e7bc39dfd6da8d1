"""AReaL rollout dumps: ``rollout/{version}/{task_id}.jsonl``, one line per sample.

AReaL's RLVR workflow (``dump_dir``) appends, for each prompt (task) of each weight version,
one line per sampled answer with ``task_id``, ``sample_idx``, ``prompt``, ``completion`` and
``reward`` (and ``seqlen``). A step is a version folder; each task file is one group.
"""

from __future__ import annotations

import re
from pathlib import Path

from gmts_core.runs.base import (
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    as_float,
    check_step_number,
    jsonl_records,
    refuse_duplicates,
    require,
)
from gmts_core.runs.limits import RunLimits, file_size, scan_folder

_VERSION = re.compile(r"\d+", re.ASCII)
_KNOWN = {"task_id", "sample_idx", "prompt", "completion", "reward"}


def _root(path: Path) -> Path:
    return path / "rollout" if (path / "rollout").is_dir() else path


def _task_files(version: Path, limits: RunLimits) -> list[Path]:
    """The ``.jsonl`` entries of a version folder that are not folders: one that is no
    regular file (a FIFO swapped in) is refused when read, naming it, not left out."""
    return sorted(
        Path(e.path)
        for e in scan_folder(version, limits)
        if e.name.endswith(".jsonl") and not e.is_dir()
    )


def _version_dirs(
    root: Path, limits: RunLimits, first_only: bool = False
) -> list[tuple[int, Path]]:
    """The version folders holding task files, by version (``first_only``: stop at one)."""
    if not root.is_dir():
        return []
    found: list[tuple[int, Path]] = []
    for e in sorted(scan_folder(root, limits), key=lambda e: e.name):
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses
        if _VERSION.fullmatch(e.name) and e.is_dir() and _task_files(Path(e.path), limits):
            found.append((check_step_number(int(e.name), Path(e.path)), Path(e.path)))
            if first_only:
                break
    found.sort()
    refuse_duplicates(found, root, "version", "folders")
    return found


class ArealReader:
    name = "areal"
    description = "AReaL rollout dumps (rollout/{version}/{task_id}.jsonl)"

    def detect(self, path: Path, limits: RunLimits) -> bool:
        return bool(_version_dirs(_root(path), limits, first_only=True))

    def index(self, path: Path, limits: RunLimits) -> list[StepRef]:
        found = _version_dirs(_root(path), limits)
        return [StepRef(v, p, last=i == len(found) - 1) for i, (v, p) in enumerate(found)]

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        groups = []
        step_bytes = rows = 0
        for task_file in _task_files(ref.path, limits):
            step_bytes += file_size(task_file, limits, "max_step_bytes")
            limits.check("max_step_bytes", step_bytes, f"{ref.path}", "its task files hold more")
            records = list(jsonl_records(task_file, ref.last, limits=limits, step_file=True))
            rows += len(records)
            limits.check("max_step_rows", rows, f"{task_file}", f"the step has {rows:,} samples")
            if not records:
                continue
            for line, _, obj in records:
                for col in ("prompt", "completion", "reward"):
                    require(obj, col, task_file, line)
            records.sort(key=lambda r: (r[2].get("sample_idx", 0), r[0]))
            prompts = {str(o["prompt"]) for _, _, o in records}
            if len(prompts) > 1:
                raise RunFormatError(
                    task_file, records[0][0], "one task file holds several different prompts"
                )
            first_line, _, first = records[0]
            groups.append(
                RunGroup(
                    prompt=str(first["prompt"]),
                    answers=[str(o["completion"]) for _, _, o in records],
                    rewards=[as_float(o["reward"], "reward", task_file, n) for n, _, o in records],
                    source=f"{task_file}:{first_line}",
                    extra={
                        k: [o.get(k) for _, _, o in records]
                        for k in sorted({k for _, _, o in records for k in o} - _KNOWN)
                    },
                )
            )
        return RunStep(ref.step, groups, str(ref.path))
