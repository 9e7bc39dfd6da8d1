"""This project's own rollout JSONL (what ``gmts analyze-file`` reads), as a run.

One group per line: ``{"prompt": ..., "completions": [...], "rewards": [...]}`` (``answers``
is accepted for ``completions``; ``reference`` and ``reward_kind`` instead of ``rewards``), and
an optional integer ``step``. Consecutive lines with the same ``step`` form one step; a line
without ``step`` is a step of its own, numbered by its line. The index is one streaming pass
that keeps only each step's byte offset, so a file of any size opens in constant memory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gmts_core.runs.base import (
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    as_float,
    jsonl_records,
    prompt_text,
    require,
)
from gmts_core.runs.limits import RunLimits
from gmts_core.runs.values import MAX_STEP, as_int

logger = logging.getLogger(__name__)


def _first_object(path: Path, limits: RunLimits) -> dict[str, Any] | None:
    """The first line's object (None: an empty file). A first line that is no JSON object
    (not JSON, nested too deeply, a bad value) raises RunFormatError saying why: this is
    the last format tried, so the reason is the run's."""
    for _, _, obj in jsonl_records(path, False, limits=limits):
        return obj
    return None


def _step_of(obj: dict[str, Any], line: int, path: Path) -> int:
    return as_int(obj.get("step", line), "step", path, line, -MAX_STEP, MAX_STEP)


class JSONLReader:
    name = "jsonl"
    description = "GMTS rollout JSONL (one group per line: prompt, completions, rewards, step)"

    def detect(self, path: Path, limits: RunLimits) -> bool:
        if not (path.is_file() and path.suffix.lower() == ".jsonl"):
            return False
        obj = _first_object(path, limits)
        return obj is not None and "prompt" in obj and ("completions" in obj or "answers" in obj)

    def index(self, path: Path, limits: RunLimits) -> list[StepRef]:
        refs: list[StepRef] = []
        seen: set[int] = set()
        for line, offset, obj in jsonl_records(path, True, limits=limits):
            step = _step_of(obj, line, path)
            if refs and refs[-1].step == step:
                continue
            if step in seen:
                raise RunFormatError(
                    path, line, f"step {step} appears again; a step's lines must be contiguous"
                )
            seen.add(step)
            refs.append(StepRef(step, path, offset, line))
            limits.check("max_run_steps", len(refs), f"{path}:{line}", f"{len(refs):,} steps")
        if refs:
            last = refs[-1]
            refs[-1] = StepRef(last.step, last.path, last.offset, last.line, last=True)
        return refs

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        groups: list[RunGroup] = []
        start, answers = ref.offset, 0
        for line, offset, obj in jsonl_records(ref.path, True, ref.offset, ref.line, limits):
            if _step_of(obj, line, ref.path) != ref.step:
                break
            where = f"{ref.path}:{line}"
            limits.check("max_step_bytes", offset - start, where, "the step's lines hold more")
            limits.check("max_step_rows", len(groups) + 1, where, "the step has more lines")
            group = group_from_line(obj, ref.path, line)
            answers += group.size
            limits.check("max_step_rows", answers, where, f"the step has {answers:,} answers")
            groups.append(group)
        return RunStep(ref.step, groups, f"{ref.path}:{ref.line}")


def group_from_line(obj: dict[str, Any], path: Path, line: int) -> RunGroup:
    prompt, chat = prompt_text(require(obj, "prompt", path, line), path, line)
    answers = obj.get("completions", obj.get("answers"))
    if answers is None:
        require(obj, "completions", path, line)
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise RunFormatError(path, line, "completions must be a non-empty list of strings")
    group = RunGroup(prompt=prompt, answers=answers, chat=chat, source=f"{path}:{line}")
    rewards = obj.get("rewards")
    if rewards is not None:
        if not isinstance(rewards, list) or len(rewards) != len(answers):
            raise RunFormatError(
                path, line, f"rewards must be a list of {len(answers)} numbers, one per completion"
            )
        group.rewards = [as_float(r, "reward", path, line) for r in rewards]
    elif "reference" in obj:
        group.reference = obj["reference"]
        if obj.get("reward_kind") is not None:
            group.extra["reward_kind"] = [obj["reward_kind"]] * len(answers)
    else:
        raise RunFormatError(path, line, "missing column 'rewards' (or a 'reference')")
    if "advantages" in obj and isinstance(obj["advantages"], list):
        group.advantages = [as_float(a, "advantage", path, line) for a in obj["advantages"]]
    return group
