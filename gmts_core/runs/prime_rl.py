"""prime-rl token exports (``enable_token_export``): ``token_exports/step_{N}/rank_{R}.jsonl``.

prime-rl's trainer (``src/prime_rl/trainer/rl/token_export.py``, ``TokenExporter``; the schema
``SCHEMA_VERSION = 1``) writes, per training step, one JSONL file per rank and one line per
packed sample that has a trained token: ``schema_version``, ``step``, ``rank``,
``micro_step``, ``micro_sequence_idx``, ``export_sequence_idx``, ``env_name`` and, one value per
token of the sample (prompt and completion alike, padding trimmed), ``token_ids``,
``position_ids``, ``loss_mask`` (bool), ``advantages``, ``inference_logprobs``,
``trainer_logprobs``, ``entropy``, ``mismatch_kl``, ``log_importance_ratio``,
``importance_ratio``, ``prob_delta``, ``is_masked``/``is_masked_high``/``is_masked_low``
(DPPO's trust-region mask), ``rl_weights``/``ce_weights``/``ref_kl_weights``; a non-finite
number, and a column the loss did not compute, is ``null``. The trainer's log-probs and
entropy are shifted right (``shift_tensor_right`` in ``train.py``) so position t holds the
token t's. A ``STABLE`` file marks a step every rank has finished.

Read here: the answer starts at the sample's first trained token (the prompt's tokens have
``loss_mask`` false; a tool output inside the answer keeps its false); groups are the samples
with the same prompt tokens (the export has no group id); the answer's advantage is the one on
its first trained token; no reward is exported (an analysis recomputing advantages needs the
logged ones, which are used as given).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gmts_core.runs.base import (
    RunFormatError,
    RunStep,
    StepRef,
    check_step_number,
    jsonl_records,
    refuse_duplicates,
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

FOLDER = "token_exports"
STEP_FOLDER = re.compile(r"step_(\d+)", re.ASCII)
RANK_FILE = re.compile(r"rank_(\d+)\.jsonl", re.ASCII)
# prime-rl's column -> this project's per-token name (gmts_core.runs.token_samples)
COLUMNS = {
    "inference_logprobs": "inference_logprob",
    "trainer_logprobs": "trainer_logprob",
    "entropy": "entropy",
    "advantages": "advantage",
    "importance_ratio": "importance_ratio",
    "mismatch_kl": "mismatch_kl",
}
EXTRA = ("env_name", "rank", "micro_step", "micro_sequence_idx", "export_sequence_idx")


def exports_folder(path: Path) -> Path:
    return path / FOLDER if (path / FOLDER).is_dir() else path


def _step_folders(folder: Path, limits: RunLimits) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        return []
    found = sorted(
        (int(m.group(1)), Path(e.path))
        for e in scan_folder(folder, limits)
        if (m := STEP_FOLDER.fullmatch(e.name)) and e.is_dir(follow_symlinks=False)
    )
    return found


def _rank_files(folder: Path, limits: RunLimits) -> list[Path]:
    found = sorted(
        (int(m.group(1)), Path(e.path))
        for e in scan_folder(folder, limits)
        if (m := RANK_FILE.fullmatch(e.name)) and not e.is_dir()
    )
    refuse_duplicates(found, folder, "rank", "files")
    return [p for _, p in found]


class PrimeRLReader:
    name = "prime_rl"
    description = "prime-rl token exports (token_exports/step_N/rank_R.jsonl, per-token numbers)"

    def detect(self, path: Path, limits: RunLimits) -> bool:
        steps = _step_folders(exports_folder(path), limits)
        return any(_rank_files(p, limits) for _, p in steps[:1])

    def index(self, path: Path, limits: RunLimits) -> list[StepRef]:
        found = _step_folders(exports_folder(path), limits)
        refuse_duplicates(found, exports_folder(path), "step", "folders")
        limits.check("max_run_steps", len(found), str(path), f"{len(found):,} steps")
        # a step's ref names its first rank file (the step is all the folder's rank files)
        refs = [
            StepRef(check_step_number(s, p), files[0])
            for s, p in found
            if (files := _rank_files(p, limits))
        ]
        if refs:  # a step without STABLE may still be written: a half-written line is dropped
            last = refs[-1]
            stable = (last.path.parent / "STABLE").exists()
            refs[-1] = StepRef(last.step, last.path, last=not stable)
        return refs

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        samples: list[TokenSample] = []
        folder = ref.path.parent
        for file in _rank_files(folder, limits):
            for line, _, obj in jsonl_records(file, ref.last, limits=limits, step_file=True):
                samples.append(_sample(obj, file, line))
                limits.check(
                    "max_step_rows", len(samples), f"{file}:{line}", f"{len(samples):,} samples"
                )
        if not samples:
            raise RunFormatError(folder, None, "no samples in the step's rank files")
        return RunStep(ref.step, groups_of(samples), str(folder))


def _sample(obj: dict[str, Any], path: Path, line: int) -> TokenSample:
    if "token_ids" not in obj or "loss_mask" not in obj:
        have = ", ".join(sorted(obj)) or "nothing"
        raise RunFormatError(path, line, f"missing column 'token_ids' or 'loss_mask' ({have})")
    ids = token_ids(obj["token_ids"], "token_ids", path, line)
    mask = flags(obj["loss_mask"], "loss_mask", path, line, len(ids))
    start = split_at_first_trained(ids, mask, path, line)
    columns: dict[str, list[Any]] = {"loss_mask": mask[start:]}
    for theirs, ours in COLUMNS.items():
        if theirs in obj and obj[theirs] is not None:
            values = numbers(obj[theirs], theirs, path, line, len(ids))
            columns[ours] = values[start:]
    advantage = (
        answer_advantage(columns["advantage"], columns["loss_mask"])
        if "advantage" in columns
        else float("nan")
    )
    return TokenSample(
        prompt_ids=ids[:start],
        answer_ids=ids[start:],
        columns=columns,
        reward=float("nan"),
        advantage=advantage,
        group_key=",".join(map(str, ids[:start])),
        source=f"{path}:{line}",
        extra={k: obj.get(k) for k in EXTRA},
    )
