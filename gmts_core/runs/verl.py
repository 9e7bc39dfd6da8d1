"""verl ``trainer.rollout_data_dir``: ``{step}.jsonl``, one line per sample.

verl (``RayPPOTrainer._dump_generations``) writes ``input`` (the prompt as decoded text),
``output`` (the response), ``gts`` (the ground truth, in recent versions), ``score``, ``step``
and every reward-extra key of the reward function. Groups are the lines with the same input.
"""

from __future__ import annotations

from gmts_core.runs.base import (
    NumberedFilesReader,
    RunGroup,
    RunStep,
    StepRef,
    as_float,
    group_by_key,
    jsonl_records,
    require,
)
from gmts_core.runs.limits import RunLimits

FILE_PATTERN = r"(\d+)\.jsonl"
_KNOWN = {"input", "output", "gts", "score", "step"}


class VerlReader(NumberedFilesReader):
    name = "verl"
    description = "verl trainer.rollout_data_dir ({step}.jsonl: input, output, gts, score, step)"
    file_pattern = FILE_PATTERN

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        records = [
            (line, obj)
            for line, _, obj in jsonl_records(ref.path, ref.last, limits=limits, step_file=True)
        ]
        keys = []
        for line, obj in records:
            for col in ("input", "output", "score"):
                require(obj, col, ref.path, line)
            keys.append(str(obj["input"]))
        groups = []
        for rows in group_by_key(keys):
            recs = [records[r] for r in rows]
            first_line, first = recs[0]
            groups.append(
                RunGroup(
                    prompt=str(first["input"]),
                    answers=[str(o["output"]) for _, o in recs],
                    rewards=[as_float(o["score"], "score", ref.path, n) for n, o in recs],
                    reference=first.get("gts"),
                    source=f"{ref.path}:{first_line}",
                    extra=_extra(recs),
                )
            )
        return RunStep(ref.step, groups, str(ref.path))


def _extra(recs: list[tuple[int, dict]]) -> dict[str, list]:
    names = sorted({k for _, o in recs for k in o} - _KNOWN)
    return {n: [o.get(n) for _, o in recs] for n in names}
