"""NeMo-RL GRPO training dumps: ``train_data_step{N}.jsonl`` in the run's log folder.

NeMo-RL's GRPO loop (``nemo_rl/algorithms/grpo.py``, "Log training data") builds, per step,
``log_data`` = ``content`` (each sample's flattened conversation text), ``rewards``,
``input_lengths``, ``token_ids`` (``train_data["input_ids"]``, right-padded to the batch's
longest), ``token_loss_mask`` (1 on the tokens of assistant messages the rollout generated,
0 on prompt, tool and environment tokens), ``sample_loss_mask``, ``advantages`` (per token),
``generation_logprobs`` (the generation engine's, per token, 0 where not generated) and
``prev_logprobs`` (the policy's before the update), optionally ``agent_ref`` and, with dynamic
sampling, ``filtered_rewards``; ``Logger.log_batched_dict_as_jsonl`` (``nemo_rl/utils/logger.py``)
writes one line per sample, ``json.dumps({**sample, "idx": i})`` where ``sample`` is
``BatchedDataDict.slice(i, i + 1)``: every value a list of one element (the sample's).
Per-token values are aligned with ``token_ids`` (position t: token t).

Read here: the sample's tokens are cut at its ``input_lengths``; the answer starts at its first
trained token (a tool output later keeps its mask 0); groups are the samples with the same
prompt tokens (GRPO repeats each prompt ``num_generations_per_prompt`` times); the answer's
advantage is the one on its first trained token, its reward ``rewards``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gmts_core.runs.base import (
    NumberedFilesReader,
    RunFormatError,
    RunStep,
    StepRef,
    as_float,
    has_match,
    jsonl_records,
)
from gmts_core.runs.limits import RunLimits, scan_folder
from gmts_core.runs.token_samples import (
    TokenSample,
    answer_advantage,
    flags,
    groups_of,
    numbers,
    split_at_first_trained,
    token_ids,
)
from gmts_core.runs.values import as_int

FILE_PATTERN = r"train_data_step(\d+)\.jsonl"
COLUMNS = {
    "generation_logprobs": "inference_logprob",
    "prev_logprobs": "trainer_logprob",
    "advantages": "advantage",
}


class NeMoRLReader(NumberedFilesReader):
    name = "nemo_rl"
    description = "NeMo-RL GRPO training dumps (train_data_stepN.jsonl, per-token numbers)"
    file_pattern = FILE_PATTERN

    def folder(self, path: Path, limits: RunLimits) -> Path:
        """The log folder itself, or the last ``logs/exp_NNN`` below a run folder that has
        the dumps (NeMo-RL's ``Logger`` numbers its log folders per launch)."""
        if has_match(path, FILE_PATTERN, limits) or not (path / "logs").is_dir():
            return path
        launches = sorted(
            (int(m.group(1)), Path(e.path))
            for e in scan_folder(path / "logs", limits)
            if (m := re.fullmatch(r"exp_(\d+)", e.name, re.ASCII)) and e.is_dir()
        )
        for _, folder in reversed(launches):
            if has_match(folder, FILE_PATTERN, limits):
                return folder
        return path

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        samples = [
            _sample(obj, ref.path, line)
            for line, _, obj in jsonl_records(ref.path, ref.last, limits=limits, step_file=True)
        ]
        if not samples:
            raise RunFormatError(ref.path, None, "no samples in the file")
        return RunStep(ref.step, groups_of(samples), str(ref.path))


def _one(obj: dict[str, Any], key: str, path: Path, line: int) -> Any:
    """The sample's value of ``key``: NeMo-RL writes each as a list of one element."""
    if key not in obj:
        have = ", ".join(sorted(obj)) or "nothing"
        raise RunFormatError(path, line, f"missing column {key!r} (the line has: {have})")
    value = obj[key]
    if not isinstance(value, list) or len(value) != 1:
        raise RunFormatError(path, line, f"{key!r} must be a list of one sample's value")
    return value[0]


def _sample(obj: dict[str, Any], path: Path, line: int) -> TokenSample:
    padded = token_ids(_one(obj, "token_ids", path, line), "token_ids", path, line)
    length = as_int(
        _one(obj, "input_lengths", path, line), "input_lengths", path, line, 0, len(padded)
    )
    ids = padded[:length]
    mask = flags(
        _one(obj, "token_loss_mask", path, line), "token_loss_mask", path, line, len(padded)
    )
    mask = mask[:length]
    start = split_at_first_trained(ids, mask, path, line)
    generated = mask[start:]  # the tokens generated, before the sample's own mask
    if "sample_loss_mask" in obj:  # a sample the loss leaves out: none of its tokens trained
        if as_float(_one(obj, "sample_loss_mask", path, line), "sample_loss_mask", path, line) == 0:
            mask = [0] * length
    columns: dict[str, list[Any]] = {"loss_mask": mask[start:]}
    for theirs, ours in COLUMNS.items():
        if theirs in obj:
            values = numbers(_one(obj, theirs, path, line), theirs, path, line, len(padded))
            columns[ours] = values[start:length]
    advantage = (
        answer_advantage(columns["advantage"], generated)
        if "advantage" in columns
        else float("nan")
    )
    reward = as_float(_one(obj, "rewards", path, line), "rewards", path, line)
    return TokenSample(
        prompt_ids=ids[:start],
        answer_ids=ids[start:],
        columns=columns,
        reward=reward,
        advantage=advantage,
        group_key=",".join(map(str, ids[:start])),
        source=f"{path}:{line}",
        extra={"idx": obj.get("idx")},
    )
