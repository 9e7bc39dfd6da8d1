"""verl's own per-step metrics: the JSON lines of its ``file`` tracking backend.

verl's trainer logs each step's metrics through ``verl.utils.tracking.Tracking``; with
``trainer.logger=[..., file]`` its ``FileLogger`` writes one line per ``log()`` call,
``orjson.dumps({"step": step, "data": metrics})``, to ``$VERL_FILE_LOGGER_PATH`` or else
``$VERL_FILE_LOGGER_ROOT/{project_name}/{experiment_name}.jsonl`` (the root defaults to the
working folder). The metrics are verl's names: ``actor/entropy``, ``critic/score/mean``
(the reward function's score; ``critic/rewards/mean`` after a KL penalty),
``response_length/mean``, ``actor/pg_loss``, ``actor/grad_norm``, ``actor/ppo_kl``,
``actor/pg_clipfrac``, ``actor/lr``, ``timing_s/*``, ``perf/*``, ``val-core/*``... A validation
pass logs a line of its own at the same step; lines of one step merge.

The file is looked for in the run's folder and one folder below it (put the file logger's
root at the run, e.g. ``VERL_FILE_LOGGER_ROOT=$ROLLOUT_DATA_DIR``): a ``.jsonl`` file whose
name is not a step number (those are ``rollout_data_dir``'s ``{step}.jsonl``) and whose first
line is ``{"step": ..., "data": {...}}``. It is read line by line (``max_line_bytes`` a line,
``max_file_bytes`` the file); a half-written last line is dropped. verl itself never imported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gmts_core.errors import GMTSError
from gmts_core.runs.base import jsonl_records
from gmts_core.runs.errors import RunFormatError
from gmts_core.runs.files import open_run_file
from gmts_core.runs.limits import RunLimitError, RunLimits, scan_folder
from gmts_core.runs.trainer_metrics import MetricsAccumulator, TrainerMetrics

_STEP_FILE = re.compile(r"\d+\.jsonl", re.ASCII)
MAX_CANDIDATES = 16  # .jsonl files whose first line is looked at
FIRST_LINE_BYTES = 1 << 16  # how much of a candidate's first line is looked at
# standard name -> verl's names for it, preferred first
KEYS: dict[str, tuple[str, ...]] = {
    "reward": ("critic/score/mean", "critic/rewards/mean"),
    "entropy": ("actor/entropy",),
    "response_length": ("response_length/mean",),
    "loss": ("actor/pg_loss",),
    "grad_norm": ("actor/grad_norm",),
    "kl": ("actor/ppo_kl", "actor/kl_loss"),
    "clip_ratio": ("actor/pg_clipfrac",),
    "learning_rate": ("actor/lr",),
}


def _candidates(path: Path, limits: RunLimits) -> list[Path]:
    """``.jsonl`` files (not ``{step}.jsonl``) in ``path`` and its folders one level down."""
    if not path.is_dir():
        return []
    found, folders = [], []
    for e in sorted(scan_folder(path, limits), key=lambda e: e.name):
        if e.is_dir(follow_symlinks=False):
            folders.append(Path(e.path))
        elif e.name.endswith(".jsonl") and not _STEP_FILE.fullmatch(e.name):
            found.append(Path(e.path))
    for folder in folders[:MAX_CANDIDATES]:
        if len(found) >= MAX_CANDIDATES:
            break
        try:
            entries = scan_folder(folder, limits)
        except (OSError, GMTSError):
            continue
        found += sorted(
            Path(e.path)
            for e in entries
            if e.name.endswith(".jsonl")
            and not _STEP_FILE.fullmatch(e.name)
            and not e.is_dir(follow_symlinks=False)
        )
    return found[:MAX_CANDIDATES]


def is_verl_log(file: Path, limits: RunLimits) -> bool:
    """Whether ``file``'s first line is a FileLogger line (``{"step": ..., "data": {...}}``).
    A file that cannot be opened safely is no log (it is never read)."""
    try:
        with open_run_file(file, limits, "max_file_bytes") as f:
            head = f.readline(FIRST_LINE_BYTES)
    except RunLimitError:  # too large: found all the same, and refused when read
        return True
    except (OSError, GMTSError):  # a link out of the root, a FIFO...: not a log, never read
        return False
    try:
        first = json.loads(head)
    except (ValueError, RecursionError):
        return head.lstrip().startswith(b'{"step":') and b'"data":' in head
    return isinstance(first, dict) and set(first) == {"step", "data"}


class VerlTrackingReader:
    name = "verl_file_logger"
    description = "verl Tracking file backend ({project}/{experiment}.jsonl: step, data)"

    def locate(self, path: Path, limits: RunLimits) -> Path | None:
        if path.suffix == ".jsonl" and not path.is_dir():
            return path if is_verl_log(path, limits) else None
        return next((f for f in _candidates(path, limits) if is_verl_log(f, limits)), None)

    def read(self, file: Path, limits: RunLimits) -> TrainerMetrics:
        acc = MetricsAccumulator(KEYS, limits, file)
        for line, _, obj in jsonl_records(file, tolerate_tail=True, limits=limits):
            if "step" not in obj or not isinstance(obj.get("data"), dict):
                raise RunFormatError(
                    file, line, 'expected a verl file-logger line {"step": ..., "data": {...}}'
                )
            acc.add(obj["step"], obj["data"], line)
        return acc.result(self.name, file)
