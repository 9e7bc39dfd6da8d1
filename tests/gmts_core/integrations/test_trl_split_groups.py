"""TRL with gradient accumulation > 1 splits each group across micro-batches (its
``steps_per_generation`` defaults to the accumulation steps, and it shuffles the generation batch
before splitting): a group-scoped selection then sees part of a group. The trainer warns at
start, naming the settings that keep groups whole, and logs the share of split groups per step
(``gmts/split_group_share``); with groups whole it logs 0. The paper's advantage is computed at
generation, over every answer of each group, so a split group still ranks with it."""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from gmts_core.integrations.trl import WHOLE_GROUP_MASK
from gmts_core.integrations.trl_selection import GROUP_IDS, paper_advantages, split_group_share
from tests.gmts_core.integrations.test_trl import make_trainer, model_dir, tiny_config

__all__ = ["model_dir"]  # the fixture, shared with test_trl.py


def framework1_kept(x: Any, ratio: float) -> set[int]:
    """Framework1's GMTS() rule on a whole batch's tokens (on-policy, beta 0): score
    H |A| / (G |o_i|) with A the paper's advantage, per group the first max(1, ceil(N (1 -
    ratio))) of a stable ascending sort removed; the flat indices it keeps."""
    answer, group = x.answer_index.tolist(), x.group_index.tolist()
    size = Counter(x.answer_group.tolist())  # every completion of the group counts in G
    length = Counter(answer)
    scores = [
        h * abs(a) / (size[g] * length[i])
        for h, a, g, i in zip(x.entropy.tolist(), x.advantage.tolist(), group, answer, strict=True)
    ]
    kept: set[int] = set()
    for g in set(group):
        entries = sorted((scores[t], t) for t in range(len(scores)) if group[t] == g)
        entries.sort(key=lambda e: e[0])  # stable: flat order on ties
        drop = max(1, math.ceil(len(entries) * (1 - ratio)))
        kept |= {t for _, t in entries[drop:]}
    return kept


def per_group_counts(batches: list[dict[str, Any]], masks: list[torch.Tensor]) -> Counter:
    counts: Counter = Counter()
    for batch, mask in zip(batches, masks, strict=True):
        for row, group in enumerate(batch[GROUP_IDS].tolist()):
            counts[group] += int(mask[row].sum())
    return counts


def test_split_groups_are_selected_whole_as_framework1(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Accumulation 2 with micro-batches of 4 and groups of 4: both groups split, yet the
    selection is made once over the whole generation batch and equals Framework1's in every
    group (0 differ), each micro-batch's loss applying its rows of it; selecting per
    micro-batch instead (the mask dropped) changes the count kept in some group."""
    config = tiny_config(
        tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=1
    )
    ratio = 0.3
    with caplog.at_level(logging.WARNING, logger="gmts_core.integrations.trl"):
        trainer = make_trainer(
            model_dir, tmp_path, config=config, token_selection="gmts_paper", selection_ratio=ratio
        )
    assert not any("gmts/split_group_share" in r.message for r in caplog.records)
    trainer.model.train()  # training: TRL generates, shuffles and splits a generation batch
    torch.manual_seed(0)
    trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    applied = trainer.last_selection
    x = applied.inputs
    assert Counter(x.answer_group.tolist()) == {0: 4, 1: 4}  # whole groups
    chosen = set(applied.selection.selected.nonzero().squeeze(-1).tolist())
    assert chosen == framework1_kept(x, ratio)
    micro = list(trainer._buffered_inputs)
    assert len(micro) == 2 and all(len(set(m[GROUP_IDS].tolist())) == 2 for m in micro)
    trainer.current_gradient_accumulation_steps = 2  # what the training loop sets
    applied_masks: list[torch.Tensor] = []
    given = trainer.get_high_entropy_mask  # what each micro-batch's loss multiplies by

    def spy(*args: Any) -> torch.Tensor:
        applied_masks.append(given(*args))
        return applied_masks[-1]

    trainer.get_high_entropy_mask = spy
    for batch in micro:
        trainer.compute_loss(trainer.model, batch)
    trainer.get_high_entropy_mask = given
    whole = per_group_counts(micro, applied_masks)
    groups = x.group_index.tolist()
    assert whole == Counter(groups[t] for t in chosen)
    split = []
    for batch in micro:
        del batch[WHOLE_GROUP_MASK]
        trainer.compute_loss(trainer.model, batch)
        split.append(trainer.last_selection.local_mask)
    assert per_group_counts(micro, split) != whole  # per micro-batch, groups come out otherwise
    trainer._metrics["train"].clear()  # the per-micro-batch selections above logged too
    trainer.train()  # a training step with the mask through TRL's shuffle and split
    shares = [
        log["gmts/split_group_share"]
        for log in trainer.state.log_history
        if "gmts/split_group_share" in log
    ]
    assert shares == [0.0]


def test_split_groups_are_warned_about_where_the_policy_moves(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With num_iterations 2 the policy moves between the micro-batches of one generation
    batch: the trainer selects per micro-batch, warns at start and logs the split share."""
    config = tiny_config(
        tmp_path,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        num_iterations=2,
        max_steps=1,
    )
    with caplog.at_level(logging.WARNING, logger="gmts_core.integrations.trl"):
        trainer = make_trainer(
            model_dir, tmp_path, config=config, token_selection="gmts_paper", selection_ratio=0.3
        )
    assert any("gmts/split_group_share" in r.message for r in caplog.records)
    trainer.train()
    shares = [
        log["gmts/split_group_share"]
        for log in trainer.state.log_history
        if "gmts/split_group_share" in log
    ]
    assert shares and shares[0] > 0  # micro-batches of 2 hold halves of groups of 4


def test_whole_groups_log_no_split(model_dir: Path, tmp_path: Path) -> None:
    trainer = make_trainer(
        model_dir, tmp_path, config=tiny_config(tmp_path, max_steps=1), token_selection="gmts"
    )
    trainer.train()
    shares = [
        log["gmts/split_group_share"]
        for log in trainer.state.log_history
        if "gmts/split_group_share" in log
    ]
    assert shares == [0.0]


def test_paper_advantages_are_framework1s_and_verls() -> None:
    rewards = torch.tensor([[1.0], [0.0], [0.0], [0.0], [2.0], [float("nan")], [1.0], [1.0]])
    f1 = paper_advantages(rewards, torch.ones(1), 4, unbiased=False, eps=1e-6).tolist()
    # group 0: mean 0.25, population std sqrt(3)/4
    std = math.sqrt(3) / 4
    assert f1[:4] == pytest.approx([(1 - 0.25) / (std + 1e-6)] + [(-0.25) / (std + 1e-6)] * 3)
    # group 1: the NaN (every function abstained) is left out and gets 0
    mean = 4 / 3
    std1 = math.sqrt(((2 - mean) ** 2 + 2 * (1 - mean) ** 2) / 3)
    assert f1[4] == pytest.approx((2 - mean) / (std1 + 1e-6)) and f1[5] == 0.0
    verl = paper_advantages(rewards, torch.ones(1), 4, unbiased=True, eps=1e-6).tolist()
    assert verl[0] == pytest.approx(0.75 / (0.5 + 1e-6))  # unbiased std 0.5
    assert split_group_share(torch.tensor([0, 0, 1, 1, 1, 1]), 4) == 0.5
