"""TRL's own per-step metrics: ``log_history`` of ``trainer_state.json``.

transformers' ``Trainer`` keeps every ``log()`` call in ``TrainerState.log_history`` (a list of
dicts, each with ``step``, ``epoch`` and the logged numbers) and writes the state as
``trainer_state.json`` into each ``checkpoint-N/`` folder and, on ``trainer.save_state()``, into
``output_dir``. TRL's ``GRPOTrainer`` logs per step ``reward``, ``reward_std``,
``rewards/<function>/mean|std``, ``entropy``, ``frac_reward_zero_std``,
``completions/mean_length`` (and min/max/clipped), ``clip_ratio/*``, ``kl`` (with a KL term),
``loss``, ``grad_norm``, ``learning_rate``, ``num_tokens``; the last entry is the training
summary (``train_runtime``...). The file read is ``output_dir/trainer_state.json`` where it
exists (``save_state`` writes the whole history at the end), else the highest-numbered
``checkpoint-N/trainer_state.json`` (a run still training). It is parsed whole, so it is held
to ``max_step_bytes``.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from gmts_core.runs.errors import RunFormatError
from gmts_core.runs.files import open_run_file
from gmts_core.runs.limits import RunLimits, scan_folder, text_encoding
from gmts_core.runs.trainer_metrics import MetricsAccumulator, TrainerMetrics
from gmts_core.runs.values import check_json

logger = logging.getLogger(__name__)

FILE = "trainer_state.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)", re.ASCII)
# standard name -> TRL's names for it, preferred first
KEYS: dict[str, tuple[str, ...]] = {
    "reward": ("reward",),
    "reward_std": ("reward_std",),
    "entropy": ("entropy",),
    "response_length": ("completions/mean_length",),
    "zero_std_share": ("frac_reward_zero_std",),
    "loss": ("loss",),
    "grad_norm": ("grad_norm",),
    "kl": ("kl",),
    "clip_ratio": ("clip_ratio/region_mean", "clip_ratio"),
    "learning_rate": ("learning_rate",),
}


class TRLStateReader:
    name = "trl_trainer_state"
    description = "TRL/transformers trainer_state.json log_history (output_dir or checkpoint-N/)"

    def locate(self, path: Path, limits: RunLimits) -> Path | None:
        if path.name == FILE and not path.is_dir():
            return path
        if not path.is_dir():
            return None
        if (path / FILE).exists() or (path / FILE).is_symlink():
            return path / FILE
        checkpoints = sorted(
            (int(m.group(1)), Path(e.path))
            for e in scan_folder(path, limits)
            if (m := _CHECKPOINT.fullmatch(e.name)) and e.is_dir(follow_symlinks=False)
        )
        for _, folder in reversed(checkpoints):
            if (folder / FILE).exists() or (folder / FILE).is_symlink():
                return folder / FILE
        return None

    def read(self, file: Path, limits: RunLimits) -> TrainerMetrics:
        state = load_state(file, limits)
        history = state.get("log_history")
        if not isinstance(history, list):
            raise RunFormatError(file, None, "no 'log_history' list: not a trainer_state.json")
        acc = MetricsAccumulator(KEYS, limits, file)
        for i, entry in enumerate(history):
            if not isinstance(entry, dict):
                raise RunFormatError(file, None, f"log_history[{i}] is not an object")
            if "step" not in entry:
                raise RunFormatError(file, None, f"log_history[{i}] has no 'step'")
            acc.add(entry["step"], {k: v for k, v in entry.items() if k != "step"}, None)
        return acc.result(self.name, file)


def load_state(file: Path, limits: RunLimits) -> dict[str, Any]:
    """``trainer_state.json`` as an object (held to ``max_step_bytes``, validated)."""
    with open_run_file(file, limits, "max_step_bytes") as f:
        data = f.read(limits.max_step_bytes + 1)
    limits.check("max_step_bytes", len(data), str(file), "the file grew while being read")
    encoding = text_encoding(data[:4])
    try:
        text = data.decode(encoding).lstrip("\ufeff")
        state = json.loads(text)
    except UnicodeDecodeError as exc:
        raise RunFormatError(file, None, f"not valid {encoding} ({exc.reason})") from None
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise RunFormatError(file, None, f"not valid JSON ({reason})") from None
    if not isinstance(state, dict):
        raise RunFormatError(file, None, f"expected a JSON object, got {type(state).__name__}")
    check_json(state, file, None)
    return state


_REWARD_KEY = re.compile(r"rewards/(.+)/mean")


def reward_function_names(run_root: Path, limits: RunLimits) -> list[str] | None:
    """The reward functions' names, in TRL's order, from the ``rewards/<name>/mean`` entries
    ``GRPOTrainer`` logs (``_generate_and_score_completions``) into ``trainer_state.json``'s
    ``log_history``; None where the run has no such file or it names none."""
    file = TRLStateReader().locate(run_root, limits)
    if file is None:
        return None
    try:
        history = load_state(file, limits).get("log_history")
    except RunFormatError as exc:  # the completions stay readable; the names are not known
        logger.warning("%s: reward function names not read (%s)", file, exc)
        return None
    names: list[str] = []
    for entry in history if isinstance(history, list) else []:
        for key in entry if isinstance(entry, dict) else {}:
            m = _REWARD_KEY.fullmatch(key)
            if m and m.group(1) not in names:
                names.append(m.group(1))
    return names or None
