"""Synthetic analysed steps of any size, for scale benchmarks and tests of the query layer.

Answer lengths are log-normal (median ``median_length`` tokens, σ 0.9, clipped to
[1, ``max_length``]) — the long right tail of RL rollouts, where a few answers run to the
length limit; token ids are Zipf-distributed over a 32k vocabulary; rewards are 0/1 with a
per-group success rate, so some groups are all-correct or all-wrong (zero signal). The
selections are each method's real rule on these numbers: the top ``ratio`` of the step by
entropy and by γ = |A| w g.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gmts_core.knobs import DEFAULT_RATIO
from gmts_core.run_dataset.writer import StepColumns

VOCAB = 32_000
_TEXTS = pa.array([f"tok{i}" for i in range(VOCAB)])


def group_advantages(reward: np.ndarray, num_groups: int, group_size: int) -> np.ndarray:
    """GRPO's advantages of a step's rewards, (num_groups * group_size,) float32: each reward
    less its group's mean over the group's population std + 1e-6; 0 in a zero-signal group."""
    by_group = reward.reshape(num_groups, group_size)
    std = by_group.std(axis=1, keepdims=True)
    adv = np.where(std > 0, (by_group - by_group.mean(axis=1, keepdims=True)) / (std + 1e-6), 0)
    return adv.reshape(-1).astype(np.float32)


def synthetic_step(
    step: int,
    num_groups: int,
    group_size: int,
    rng: np.random.Generator,
    median_length: float = 70.0,
    max_length: int = 8192,
    ratio: float = DEFAULT_RATIO,
) -> StepColumns:
    """One step of ``num_groups`` × ``group_size`` answers with entropy and gmts selections."""
    m = num_groups * group_size
    lengths = np.clip(np.rint(rng.lognormal(np.log(median_length), 0.9, m)), 1, max_length).astype(
        np.int32
    )
    n = int(lengths.sum())
    a_group = np.repeat(np.arange(num_groups, dtype=np.int32), group_size)
    a_index = np.tile(np.arange(group_size, dtype=np.int32), num_groups)
    p_success = rng.beta(0.6, 0.6, num_groups)
    reward = (rng.random(m) < np.repeat(p_success, group_size)).astype(np.float32)
    advantage = group_advantages(reward, num_groups, group_size)
    weight = np.full(m, 1.0 / max(n, 1), dtype=np.float32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    entropy = rng.gamma(0.4, 0.6, n).astype(np.float32)
    grad_norm = np.sqrt(1 - np.exp(-entropy)).astype(np.float32) * rng.random(n, np.float32)
    per_token_scale = np.repeat(np.abs(advantage) * weight, lengths)
    gamma = (per_token_scale * grad_norm).astype(np.float32)
    k = int(n * ratio)
    selected = {}
    for name, score in (("entropy", entropy), ("gmts", gamma)):
        flags = np.zeros(n, dtype=bool)
        flags[np.argsort(-score, kind="stable")[:k]] = True
        selected[name] = flags
    ids = np.minimum(rng.zipf(1.3, n), VOCAB) - 1
    return StepColumns(
        step=step,
        methods=("entropy", "gmts"),
        group=np.repeat(a_group, lengths),
        answer=np.repeat(a_index, lengths),
        position=(np.arange(n) - np.repeat(starts, lengths)).astype(np.int32),
        token_id=ids.astype(np.int64),
        text=pa.DictionaryArray.from_arrays(pa.array(ids.astype(np.int32)), _TEXTS),
        logprob=-rng.exponential(0.3, n).astype(np.float32),
        entropy=entropy,
        grad_norm=grad_norm,
        gamma=gamma,
        selected=selected,
        answer_group=a_group,
        answer_index=a_index,
        prompt=[f"Q{step}-{g}: what is {g} + {step}?" for g in a_group.tolist()],
        answer_text=[
            f"answer {i} of step {step}: {'right' if r else 'wrong'}"
            for i, r in enumerate(reward.tolist())
        ],
        reward=reward,
        advantage=advantage,
        weight=weight,
        length=lengths,
    )
