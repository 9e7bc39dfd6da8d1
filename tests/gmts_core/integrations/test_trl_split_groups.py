"""TRL with gradient accumulation > 1 splits each group across micro-batches (its
``steps_per_generation`` defaults to the accumulation steps, and it shuffles the generation batch
before splitting): a group-scoped selection then sees part of a group. The trainer warns at
start, naming the settings that keep groups whole, and logs the share of split groups per step
(``gmts/split_group_share``); with groups whole it logs 0. The paper's advantage is computed at
generation, over every answer of each group, so a split group still ranks with it."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import torch

from gmts_core.integrations.trl_terms import paper_advantages, split_group_share
from tests.gmts_core.integrations.test_trl import make_trainer, model_dir, tiny_config

__all__ = ["model_dir"]  # the fixture, shared with test_trl.py


def test_split_groups_are_warned_about_and_logged(
    model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tiny_config(
        tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=1
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
