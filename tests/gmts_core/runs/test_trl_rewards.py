"""TRL completions: the rewards and advantages read back are the ones TRL computed, whatever
numeric columns a reward function logged next to them (``log_extra``).

TRL's computation is mirrored from ``trl/trainer/grpo_trainer.py`` (TRL 1.16.0,
``_generate_and_score_completions``): float32, ``nansum`` of the weighted rewards, the group
mean, ``scale_rewards`` "group"/"batch"/"none" with ``std + 1e-4``, or ``normalize_then_sum``;
the file is built as ``GRPOTrainer.log`` builds it: ``{step, prompt, completion, **rewards,
**extra, advantage}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_core.runs import open_run
from gmts_core.runs.trl import groups_from_table
from gmts_core.runs.trl_rewards import AMBIGUOUS, NAMED, RECOVERED, UNKNOWN


def nanstd(t: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """TRL's ``nanstd`` (unbiased, NaN left out)."""
    mean = torch.nanmean(t, dim=dim, keepdim=True)
    var = torch.nanmean((t - mean) ** 2, dim=dim)
    count = torch.sum(~torch.isnan(t), dim=dim)
    return torch.sqrt(var * count / (count - 1))


def trl_advantages(
    per_func: np.ndarray, weights: np.ndarray, g: int, scale: str, aggregation: str
) -> tuple[np.ndarray, np.ndarray]:
    """(rewards, advantages) as TRL computes and logs them (float32)."""
    r = torch.tensor(per_func, dtype=torch.float32)
    w = torch.tensor(weights, dtype=torch.float32)
    unscorable = torch.isnan(r).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (r * w.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        mean = torch.nanmean(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
        if scale in ("group", "none"):
            std = nanstd(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
        else:
            std = nanstd(rewards).expand_as(rewards)
        adv = rewards - mean
        if scale != "none":
            adv = adv / (std + 1e-4)
    else:
        grouped = r.view(-1, g, r.shape[1])
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = nanstd(grouped, dim=1).unsqueeze(1)
        rk = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, r.shape[1])
        summed = (rk * w.unsqueeze(0)).nansum(dim=1)
        summed[unscorable] = torch.nan
        adv = (summed - torch.nanmean(summed)) / (nanstd(summed) + 1e-4)
    adv = torch.nan_to_num(adv, nan=0.0)
    logged = (r * w.unsqueeze(0)).nansum(dim=1)  # what GMTS shows as the reward
    logged[unscorable] = torch.nan
    return np.array(logged.tolist()), np.array(adv.tolist())


def trl_table(per_func: np.ndarray, extras: np.ndarray, adv: np.ndarray, g: int) -> pa.Table:
    n = per_func.shape[0]
    table = {
        "step": [1] * n,
        "prompt": [f"Q{i // g}" for i in range(n)],
        "completion": [f"a{i}" for i in range(n)],
        **{f"reward_{k}": per_func[:, k].tolist() for k in range(per_func.shape[1])},
        **{f"extra_{k}": extras[:, k].tolist() for k in range(extras.shape[1])},
        "advantage": adv.tolist(),
    }
    return pa.Table.from_pandas(pd.DataFrame(table))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31 - 1),
    g=st.sampled_from([2, 4, 8]),
    groups=st.integers(1, 4),
    k=st.integers(1, 3),
    extras=st.integers(1, 3),
    scale=st.sampled_from(["group", "batch", "none"]),
    aggregation=st.sampled_from(["sum_then_normalize", "normalize_then_sum"]),
    unit=st.booleans(),
    named=st.booleans(),
)
def test_rewards_and_advantages_read_back_as_trl_computed_them(
    seed: int,
    g: int,
    groups: int,
    k: int,
    extras: int,
    scale: str,
    aggregation: str,
    unit: bool,
    named: bool,
) -> None:
    rng = np.random.default_rng(seed)
    n = g * groups
    per_func = rng.integers(0, 3, size=(n, k)).astype(np.float64)  # correctness-like rewards
    per_func[rng.random((n, k)) < 0.1] = np.nan  # a function that abstained (None)
    extra = np.column_stack(
        [
            rng.integers(0, 50, n).astype(np.float64) if e % 2 == 0 else rng.normal(size=n)
            for e in range(extras)
        ]
    )
    weights = np.ones(k) if unit else rng.uniform(0.2, 2.0, k).round(2)
    rewards, adv = trl_advantages(per_func, weights, g, scale, aggregation)
    names = [f"reward_{i}" for i in range(k)] if named else None
    got, found = groups_from_table(trl_table(per_func, extra, adv, g), Path("c.parquet"), names)

    # the logged advantage is what is read, always
    assert [a for grp in got for a in grp.advantages] == adv.tolist()
    read = np.array([r for grp in got for r in (grp.rewards or [np.nan] * grp.size)])
    if named and (unit or aggregation == "sum_then_normalize"):
        assert found.how == NAMED
    if found.how in (NAMED, RECOVERED):
        # a claim of "these are the rewards" is true: TRL's weighted sum with unit weights (its
        # default); with other reward_weights, which the file does not hold, the same up to
        # one common factor (the advantage is unchanged when every weight is scaled)
        scored = ~np.isnan(rewards)
        assert (np.isnan(read) == ~scored).all()
        if unit:
            np.testing.assert_allclose(read[scored], rewards[scored], rtol=1e-5, atol=1e-5)
        elif (
            "cannot tell" not in found.note
            and "does not reproduce" not in found.note
            and (np.abs(rewards[scored]) > 1e-6).any()
        ):
            big = np.argmax(np.abs(rewards[scored]))
            factor = read[scored][big] / rewards[scored][big]
            np.testing.assert_allclose(read[scored], factor * rewards[scored], rtol=1e-3, atol=1e-3)
    if found.how in (NAMED, RECOVERED):
        # never an extra column taken for a reward: the names are a leading set of rewards
        assert all(name.startswith("reward_") for name in found.names)
    if found.how == RECOVERED:
        assert found.names == tuple(f"reward_{i}" for i in range(k))
    if found.how in (AMBIGUOUS, UNKNOWN):
        assert "cannot" in found.note  # it says the file cannot tell


def test_an_extra_count_is_not_added_to_the_reward(tmp_path: Path) -> None:
    """Issue 45's case: accuracy_reward [1, 0, 1, 0] next to a logged num_reasoning_steps
    [3, 7, 2, 9]: the rewards read are [1, 0, 1, 0] and the advantages TRL's own."""
    acc = np.array([[1.0], [0.0], [1.0], [0.0]])
    _, adv = trl_advantages(acc, np.ones(1), 4, "group", "sum_then_normalize")
    folder = tmp_path / "completions"
    folder.mkdir()
    pd.DataFrame(
        {
            "step": [3] * 4,
            "prompt": ["Q"] * 4,
            "completion": ["a", "b", "c", "d"],
            "accuracy_reward": acc[:, 0],
            "num_reasoning_steps": [3, 7, 2, 9],
            "advantage": adv,
        }
    ).to_parquet(folder / "completions_00003.parquet")
    (group,) = open_run(tmp_path).step(3).groups
    assert group.rewards == [1.0, 0.0, 1.0, 0.0]
    assert group.advantages == adv.tolist()
    assert group.extra["num_reasoning_steps"] == [3, 7, 2, 9]
    signs = np.sign(np.array(group.rewards) - np.mean(group.rewards))
    assert (signs == np.sign(adv)).all()


@pytest.mark.parametrize("broken", ["{", json.dumps([1, 2])])
def test_an_unreadable_trainer_state_leaves_the_completions_readable(
    tmp_path: Path, broken: str
) -> None:
    folder = tmp_path / "completions"
    folder.mkdir()
    pd.DataFrame(
        {
            "step": [1, 1],
            "prompt": ["Q", "Q"],
            "completion": ["a", "b"],
            "r": [1.0, 0.0],
            "advantage": [0.7, -0.7],
        }
    ).to_parquet(folder / "completions_00001.parquet")
    (tmp_path / "trainer_state.json").write_text(broken)
    (group,) = open_run(tmp_path).step(1).groups
    assert group.rewards == [1.0, 0.0]


def test_a_prompt_drawn_twice_in_a_batch_is_two_groups() -> None:
    """TRL writes each group's G answers in a row; a prompt drawn twice gives a run of 2G rows
    (or two runs apart): two groups of G, never one of 2G."""
    from gmts_core.runs.trl import trl_groups

    keys = ["a"] * 8 + ["b"] * 4 + ["a"] * 4
    assert trl_groups(keys) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert trl_groups(["a", "a", "b"]) == [[0, 1], [2]]  # no common G: the runs
