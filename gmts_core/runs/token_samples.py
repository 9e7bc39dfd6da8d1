"""Per-token trainer dumps (prime-rl, NeMo-RL, open-instruct): one sample's token ids and the
numbers the trainer logged per token, validated, then grouped into :class:`RunGroup` s.

Every such dump stores the prompt and the answer as token ids (the texts are the ids decoded by
the analysing model's tokenizer: :attr:`RunGroup.texts_from_ids`) and some of these per-token
columns, which the readers rename to one vocabulary (:data:`TOKEN_COLUMNS`), so that the views,
the analysis and the tests read them alike:

=================== ==========================================================================
``loss_mask``       1: the trainer's loss counted the token; 0: it did not (a tool output)
``inference_logprob`` log-prob of the token under the rollout engine (vLLM, SGLang) that sampled it
``trainer_logprob`` log-prob of the token under the trainer's policy before the update
``entropy``         Shannon entropy (nats) of the trainer's next-token distribution
``advantage``       the advantage the loss multiplied the token's log-prob by
``importance_ratio`` trainer / inference probability ratio (prime-rl)
``mismatch_kl``     ratio - log ratio - 1 (prime-rl's per-token train/inference KL estimate)
=================== ==========================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gmts_core.runs.base import RunFormatError, RunGroup, group_by_key
from gmts_core.runs.values import MAX_ABS_NUMBER

MAX_TOKEN_ID = 2**31 - 1
TOKEN_COLUMNS = (
    "loss_mask",
    "inference_logprob",
    "trainer_logprob",
    "entropy",
    "advantage",
    "importance_ratio",
    "mismatch_kl",
)


@dataclass
class TokenSample:
    """One answer of a per-token dump: its prompt and answer ids, its per-token columns (one
    value per answer token, names of :data:`TOKEN_COLUMNS`), its reward and advantage (NaN:
    not in the dump), the key its group is found by, and where it was read."""

    prompt_ids: list[int]
    answer_ids: list[int]
    columns: dict[str, list[Any]]
    reward: float
    advantage: float
    group_key: str
    source: str
    extra: dict[str, Any] = field(default_factory=dict)


def token_ids(value: Any, what: str, path: Path, line: int | None) -> list[int]:
    """A list of token ids, each an integer in [0, 2**31 - 1]."""
    if not isinstance(value, list):
        raise RunFormatError(path, line, f"{what} must be a list of token ids")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TOKEN_ID:
            raise RunFormatError(path, line, f"{what} holds {v!r:.40}, not a token id")
    return value


def numbers(value: Any, what: str, path: Path, line: int | None, length: int) -> list[float]:
    """A list of ``length`` per-token numbers: finite, at most MAX_ABS_NUMBER in magnitude;
    None (a trainer's way of writing a non-finite value) is NaN."""
    if not isinstance(value, list) or len(value) != length:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise RunFormatError(path, line, f"{what} must hold {length} values, got {got}")
    out = []
    for v in value:
        if v is None:
            out.append(math.nan)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise RunFormatError(path, line, f"{what} holds {v!r:.40}, not a number")
        x = float(v)
        if math.isinf(x) or abs(x) > MAX_ABS_NUMBER:
            raise RunFormatError(path, line, f"{what} holds {v!r:.40}, out of range")
        out.append(x)
    return out


def flags(value: Any, what: str, path: Path, line: int | None, length: int) -> list[int]:
    """A per-token mask of ``length`` values, each true/false or 1/0."""
    if not isinstance(value, list) or len(value) != length:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise RunFormatError(path, line, f"{what} must hold {length} values, got {got}")
    out = []
    for v in value:
        if v in (0, 1) and isinstance(v, (bool, int)):
            out.append(int(v))
        elif isinstance(v, float) and v in (0.0, 1.0):
            out.append(int(v))
        else:
            raise RunFormatError(path, line, f"{what} holds {v!r:.40}, not 0 or 1")
    return out


def split_at_first_trained(ids: list[int], mask: list[int], path: Path, line: int | None) -> int:
    """Where the answer starts in a sequence of prompt and answer tokens: the first token the
    loss counts (prompt tokens are never trained; a tool output later in the answer may not
    be either, and stays in the answer with its mask 0)."""
    for i, m in enumerate(mask):
        if m:
            return i
    raise RunFormatError(path, line, "no token of the sample is trained (loss mask all 0)")


def groups_of(samples: list[TokenSample]) -> list[RunGroup]:
    """The samples grouped by their key (in order of first appearance); a group's rewards and
    advantages are None where any answer lacks one (NaN)."""
    groups = []
    for rows in group_by_key([s.group_key for s in samples]):
        members = [samples[r] for r in rows]
        first = members[0]
        names = [c for c in TOKEN_COLUMNS if any(c in s.columns for s in members)]
        group = RunGroup(
            prompt="",
            answers=["" for _ in members],
            source=first.source,
            token_ids=[s.answer_ids for s in members],
            # an answer without the column has None there (RunGroup.token_columns allows it)
            token_columns={c: [s.columns.get(c) for s in members] for c in names},  # type: ignore[misc]
            prompt_token_ids=first.prompt_ids,
            texts_from_ids=True,
            extra={k: [s.extra.get(k) for s in members] for k in first.extra},
        )
        rewards = [s.reward for s in members]
        if not any(math.isnan(r) for r in rewards):
            group.rewards = rewards
        advantages = [s.advantage for s in members]
        if not any(math.isnan(a) for a in advantages):
            group.advantages = advantages
        groups.append(group)
    return groups


def answer_advantage(per_token: list[float], mask: list[int]) -> float:
    """An answer's advantage from its per-token advantages: the value on its first trained
    token (GRPO trainers broadcast one advantage over the answer's trained tokens and write 0
    elsewhere); NaN where no token is trained."""
    for a, m in zip(per_token, mask, strict=True):
        if m:
            return a
    return math.nan


# per-token columns that say whether the trainer's loss counted a token (1) or not (0)
MASK_COLUMNS = ("loss_mask", "response_mask", "token_loss_mask")


def trained_mask(group: RunGroup) -> list[list[bool]] | None:
    """The group's loss mask (one flag per answer token: trained or not) from the first
    per-token mask column the reader gave (:data:`MASK_COLUMNS`); None: every token trained.
    An answer whose mask is missing (null) counts as trained throughout."""
    for name in MASK_COLUMNS:
        column = group.token_columns.get(name)
        if column is None or group.token_ids is None:
            continue
        return [
            [bool(v) for v in mask] if mask is not None else [True] * len(ids)
            for mask, ids in zip(column, group.token_ids, strict=True)
        ]
    return None
