"""AReaL rollout dumps: ``rollout/{version}/{task_id}.jsonl``, one line per sample.

AReaL's RLVR workflow (``dump_dir``) appends, for each prompt (task) of each weight version,
one line per sampled answer with ``task_id``, ``sample_idx``, ``prompt``, ``completion`` and
``reward`` (and ``seqlen``). A step is a version folder; each task file is one group.
"""

from __future__ import annotations

from pathlib import Path

from gmts_core.runs.base import (
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    as_float,
    jsonl_records,
    require,
)
from gmts_core.runs.registry import register_reader

_KNOWN = {"task_id", "sample_idx", "prompt", "completion", "reward"}


def _root(path: Path) -> Path:
    return path / "rollout" if (path / "rollout").is_dir() else path


def _version_dirs(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    return sorted(
        (int(p.name), p)
        for p in root.iterdir()
        if p.is_dir() and p.name.isdigit() and any(p.glob("*.jsonl"))
    )


class ArealReader:
    name = "areal"
    description = "AReaL rollout dumps (rollout/{version}/{task_id}.jsonl)"

    def detect(self, path: Path) -> bool:
        return bool(_version_dirs(_root(path)))

    def index(self, path: Path) -> list[StepRef]:
        found = _version_dirs(_root(path))
        return [StepRef(v, p, last=i == len(found) - 1) for i, (v, p) in enumerate(found)]

    def load(self, ref: StepRef) -> RunStep:
        groups = []
        for task_file in sorted(ref.path.glob("*.jsonl")):
            records = list(jsonl_records(task_file, tolerate_tail=ref.last))
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


register_reader(ArealReader())
