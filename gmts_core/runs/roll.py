"""ROLL ``rollout_dump_dir``: ``rollout_dump_data.step_{N}.jsonl``, one column-oriented line.

ROLL (``roll/pipeline/rlvr/utils.py``, ``write_to_json_process``) writes one JSON object per
step whose values are lists, one entry per sample: ``global_step``, ``id``, ``prompt``,
``messages``, ``ground_truth``, ``responses``, ``scores``, ``tag``, ``domain``... Groups are the
samples with the same prompt.
"""

from __future__ import annotations

from gmts_core.runs.base import (
    NumberedFilesReader,
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    as_float,
    group_by_key,
    jsonl_records,
    require,
)
from gmts_core.runs.limits import RunLimits

FILE_PATTERN = r"rollout_dump_data\.step_(\d+)\.jsonl"
_KNOWN = {"prompt", "responses", "scores", "ground_truth", "global_step"}


class ROLLReader(NumberedFilesReader):
    name = "roll"
    description = "ROLL rollout_dump_dir (rollout_dump_data.step_N.jsonl, column-oriented)"
    file_pattern = FILE_PATTERN

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        records = list(jsonl_records(ref.path, ref.last, limits=limits, step_file=True))
        if not records:
            raise RunFormatError(ref.path, None, "empty file")
        line, _, obj = records[0]
        cols = {c: require(obj, c, ref.path, line) for c in ("prompt", "responses", "scores")}
        n = len(cols["responses"]) if isinstance(cols["responses"], list) else 0
        limits.check("max_step_rows", n, f"{ref.path}:{line}", f"the step has {n:,} responses")
        for name, values in obj.items():
            if not isinstance(values, list) or len(values) != n:
                got = len(values) if isinstance(values, list) else type(values).__name__
                raise RunFormatError(
                    ref.path, line, f"column {name!r} has {got} entries for {n} responses"
                )
        truth = obj.get("ground_truth", [None] * n)
        extra = {k: v for k, v in obj.items() if k not in _KNOWN}
        groups = []
        for rows in group_by_key([str(p) for p in cols["prompt"]]):
            groups.append(
                RunGroup(
                    prompt=str(cols["prompt"][rows[0]]),
                    answers=[str(cols["responses"][r]) for r in rows],
                    rewards=[as_float(cols["scores"][r], "scores", ref.path, line) for r in rows],
                    reference=truth[rows[0]],
                    source=f"{ref.path}:{line}",
                    extra={k: [v[r] for r in rows] for k, v in extra.items()},
                )
            )
        return RunStep(ref.step, groups, str(ref.path))
