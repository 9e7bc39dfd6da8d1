"""open-instruct GRPO rollouts (``--save_traces --rollouts_save_path DIR``):
``DIR/{run_name}_rollouts_{shard:06d}.jsonl``.

open-instruct (``open_instruct/rl_utils.py``: ``RolloutRecord``, ``_save_rollouts``,
``save_rollouts_to_disk``; called from ``open_instruct/data_loader.py``) appends, per training
step, one line per sample, ``json.dumps(asdict(RolloutRecord(...)))``: ``step``,
``sample_idx``, ``prompt_idx`` (``i // num_samples_per_prompt``: the group within the step),
``prompt_tokens``, ``response_tokens``, ``reward`` (the verifier's score), ``advantage`` (the
group-standardised score: (r - mean) / (std + 1e-8), population std, or r - mean with
``advantage_normalization_type="centered"``), ``finish_reason``, ``dataset``,
``ground_truth``, ``request_info`` (tool calls and outputs, or null) and ``logprobs`` (vLLM's
per-token log-probs of the response, or null). A shard holds ``ROLLOUT_SHARD_SIZE`` (10,000)
samples, then the next is started; a step's batch lies in one shard. ``{run_name}_metadata
.jsonl`` beside them names the model and the git commit.

Read here: a step is the contiguous lines of one ``step``; groups by ``prompt_idx``; the
response tokens are the answer, all trained (open-instruct saves no loss mask; its tool outputs
are masked in training but not marked in this file).
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

from gmts_core.runs.base import (
    RunFormatError,
    RunStep,
    StepRef,
    as_float,
    jsonl_records,
    refuse_duplicates,
    require,
)
from gmts_core.runs.limits import RunLimits, scan_folder
from gmts_core.runs.token_samples import TokenSample, groups_of, numbers, token_ids
from gmts_core.runs.values import MAX_STEP, as_int

logger = logging.getLogger(__name__)

FILE = re.compile(r"(.+)_rollouts_(\d{6,})\.jsonl", re.ASCII)
EXTRA = ("sample_idx", "prompt_idx", "finish_reason", "dataset")


def shards(path: Path, limits: RunLimits) -> list[Path]:
    """The run's shard files in order (one run's: several run names in one folder are refused,
    naming them); ``path`` may be one shard."""
    if path.is_file():
        return [path] if FILE.fullmatch(path.name) else []
    if not path.is_dir():
        return []
    found: dict[str, list[tuple[int, Path]]] = {}
    for e in scan_folder(path, limits):
        if (m := FILE.fullmatch(e.name)) and not e.is_dir():
            found.setdefault(m.group(1), []).append((int(m.group(2)), Path(e.path)))
    if len(found) > 1:
        names = ", ".join(sorted(found)[:8])
        raise RunFormatError(
            path, None, f"rollouts of {len(found)} runs ({names}): open one shard file"
        )
    for run in found.values():
        run.sort()
        refuse_duplicates(run, path, "shard", "files")
        return [p for _, p in run]
    return []


class OpenInstructReader:
    name = "open_instruct"
    description = "open-instruct saved rollouts (RUN_rollouts_NNNNNN.jsonl: token ids, rewards)"

    def detect(self, path: Path, limits: RunLimits) -> bool:
        return bool(shards(path, limits))

    def index(self, path: Path, limits: RunLimits) -> list[StepRef]:
        """One streaming pass over the shards keeping each step's file, byte offset and line."""
        files = shards(path, limits)
        refs: list[StepRef] = []
        seen: set[int] = set()
        for i, file in enumerate(files):
            last_file = i == len(files) - 1
            for line, offset, obj in jsonl_records(file, last_file, limits=limits):
                step = _step(obj, file, line)
                if refs and refs[-1].step == step and refs[-1].path == file:
                    continue
                if step in seen:
                    raise RunFormatError(
                        file, line, f"step {step} appears again; a step's lines must be contiguous"
                    )
                seen.add(step)
                refs.append(StepRef(step, file, offset, line))
                limits.check("max_run_steps", len(refs), f"{file}:{line}", f"{len(refs):,} steps")
        if refs:
            last = refs[-1]
            refs[-1] = StepRef(last.step, last.path, last.offset, last.line, last=True)
        return refs

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        samples: list[TokenSample] = []
        start = ref.offset
        records = jsonl_records(ref.path, ref.last, ref.offset, ref.line, limits)
        for line, offset, obj in records:
            if _step(obj, ref.path, line) != ref.step:
                break
            where = f"{ref.path}:{line}"
            limits.check("max_step_bytes", offset - start, where, "the step's lines hold more")
            samples.append(_sample(obj, ref.path, line))
            limits.check("max_step_rows", len(samples), where, f"{len(samples):,} samples")
        return RunStep(ref.step, groups_of(samples), f"{ref.path}:{ref.line}")


def _step(obj: dict[str, Any], path: Path, line: int) -> int:
    return as_int(require(obj, "step", path, line), "step", path, line, -MAX_STEP, MAX_STEP)


def _sample(obj: dict[str, Any], path: Path, line: int) -> TokenSample:
    prompt = token_ids(require(obj, "prompt_tokens", path, line), "prompt_tokens", path, line)
    answer = token_ids(require(obj, "response_tokens", path, line), "response_tokens", path, line)
    if not answer:
        raise RunFormatError(path, line, "response_tokens is empty")
    columns: dict[str, list[Any]] = {}
    if obj.get("logprobs") is not None:
        columns["inference_logprob"] = numbers(obj["logprobs"], "logprobs", path, line, len(answer))
    group = as_int(require(obj, "prompt_idx", path, line), "prompt_idx", path, line, 0, MAX_STEP)
    reward = as_float(require(obj, "reward", path, line), "reward", path, line)
    advantage = as_float(obj.get("advantage"), "advantage", path, line)
    return TokenSample(
        prompt_ids=prompt,
        answer_ids=answer,
        columns=columns,
        reward=reward,
        advantage=advantage if not math.isnan(advantage) else math.nan,
        group_key=f"prompt {group}",
        source=f"{path}:{line}",
        extra={k: obj.get(k) for k in EXTRA} | {"reference": obj.get("ground_truth")},
    )
