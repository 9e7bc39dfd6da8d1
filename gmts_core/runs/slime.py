"""slime rollout dumps (``--save-debug-rollout-data``, or ``--dump-details DIR``):
``DIR/rollout_data/{rollout_id}.pt``, loaded only with ``torch.load(weights_only=True)``.

slime (``slime/observability/rollout_data_utils.py``, ``save_debug_rollout_data``) writes
``torch.save({"rollout_id": N, "samples": [sample.to_dict() ...]}, path)``; ``Sample.to_dict``
(``slime/utils/types.py``) is the sample's ``__dict__`` with its ``status`` as its string value
and its ``spec_info``/``prefix_cache_info`` as dicts: ``group_index``, ``index``, ``prompt``,
``tokens`` (prompt and response ids), ``response``, ``response_length``, ``label``, ``reward``
(a number, or a dict of them), ``loss_mask`` (per response token), ``rollout_log_probs`` (the
rollout engine's, per response token), ``status``, ``metadata``... Evaluation rollouts are
``eval_{N}.pt`` (not steps); the train side (``train_data/``) is not read.

The file is pickle. It is unpickled only by PyTorch's restricted unpickler
(``weights_only=True``: tensors, numbers, strings, lists, dicts; no class of the sample's
own, no code), inside the reading process where the server reads runs, after its size is held
to ``max_step_bytes``; a file that needs more (a ``metadata`` holding another object) is
refused with the unpickler's reason. Groups are the samples' ``group_index`` (else the same
prompt tokens); the answer is the last ``response_length`` tokens, its mask ``loss_mask``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gmts_core.runs.base import NumberedFilesReader, RunFormatError, RunStep, StepRef, as_float
from gmts_core.runs.errors import UnsafeRunFormatError
from gmts_core.runs.files import open_run_file
from gmts_core.runs.limits import RunLimits
from gmts_core.runs.token_samples import TokenSample, flags, groups_of, numbers, token_ids
from gmts_core.runs.values import MAX_STEP, as_int

FOLDER = "rollout_data"
FILE_PATTERN = r"(\d+)\.pt"


def _plain(value: Any) -> Any:
    """A tensor as a list (slime keeps some per-token columns as tensors)."""
    import torch  # only where a .pt file is read (importing the readers stays light)

    return value.detach().cpu().reshape(-1).tolist() if isinstance(value, torch.Tensor) else value


class SlimeReader(NumberedFilesReader):
    name = "slime"
    description = "slime --save-debug-rollout-data (rollout_data/N.pt, weights_only unpickling)"
    file_pattern = FILE_PATTERN

    def folder(self, path: Path, limits: RunLimits) -> Path:
        return path / FOLDER if (path / FOLDER).is_dir() else path

    def detect(self, path: Path, limits: RunLimits) -> bool:
        # only a folder named rollout_data (or one holding it): a bare N.pt elsewhere is not ours
        folder = self.folder(path, limits)
        return folder.name == FOLDER and super().detect(path, limits)

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        data = load_restricted(ref.path, limits)
        samples = data.get("samples") if isinstance(data, dict) else None
        if not isinstance(samples, list):
            raise RunFormatError(ref.path, None, "expected {'rollout_id': N, 'samples': [...]}")
        limits.check("max_step_rows", len(samples), str(ref.path), f"{len(samples):,} samples")
        out = [_sample(s, ref.path, i) for i, s in enumerate(samples)]
        if not out:
            raise RunFormatError(ref.path, None, "no samples")
        return RunStep(ref.step, groups_of(out), str(ref.path))


def load_restricted(path: Path, limits: RunLimits) -> Any:
    """``torch.load(weights_only=True)`` of a run file opened inside the run root, its bytes
    held to ``max_step_bytes``; anything the restricted unpickler refuses is refused."""
    import torch  # only where a .pt file is read (importing the readers stays light)

    with open_run_file(path, limits, "max_step_bytes") as f:
        try:
            return torch.load(f, map_location="cpu", weights_only=True)
        except MemoryError:  # the reading process's address-space limit: its own answer
            raise
        except Exception as exc:  # torch raises many kinds (UnpicklingError, RuntimeError...)
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise UnsafeRunFormatError(
                path,
                None,
                "not loadable with torch.load(weights_only=True), the only way this tool "
                f"unpickles ({reason})",
            ) from None


def _sample(obj: Any, path: Path, i: int) -> TokenSample:
    if not isinstance(obj, dict):
        raise RunFormatError(path, None, f"sample {i} is not a dict")
    where = f"sample {i}"
    ids = token_ids(_plain(obj.get("tokens")), f"{where}: tokens", path, None)
    length = as_int(
        obj.get("response_length"), f"{where}: response_length", path, None, 0, len(ids)
    )
    if length == 0:
        raise RunFormatError(path, None, f"{where}: no response tokens")
    prompt, answer = ids[: len(ids) - length], ids[len(ids) - length :]
    columns: dict[str, list[Any]] = {}
    if obj.get("loss_mask") is not None:
        columns["loss_mask"] = flags(
            _plain(obj["loss_mask"]), f"{where}: loss_mask", path, None, length
        )
    if obj.get("rollout_log_probs") is not None:
        columns["inference_logprob"] = numbers(
            _plain(obj["rollout_log_probs"]), f"{where}: rollout_log_probs", path, None, length
        )
    reward = obj.get("reward")
    group = obj.get("group_index")
    return TokenSample(
        prompt_ids=prompt,
        answer_ids=answer,
        columns=columns,
        reward=as_float(reward, f"{where}: reward", path, None)
        if not isinstance(reward, dict)
        else math.nan,  # a dict of rewards: which key trained (--reward-key) is not in the file
        advantage=math.nan,  # computed on the train side, not in the rollout dump
        group_key=f"group {as_int(group, 'group_index', path, None, 0, MAX_STEP)}"
        if group is not None
        else ",".join(map(str, prompt)),
        source=f"{path}:{where}",
        extra={"index": obj.get("index"), "status": obj.get("status"), "label": obj.get("label")},
    )
