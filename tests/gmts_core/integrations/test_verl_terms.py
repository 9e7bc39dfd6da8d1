"""verl's aggregation weights, uid groups and the GMTS selection of padded verl tensors, without
verl (gmts_core.integrations.verl_terms is verl-free; tests/verl covers the plugin itself)."""

from __future__ import annotations

import math

import pytest
import torch

from gmts_core.errors import InvalidInputError
from gmts_core.integrations.verl_terms import (
    VERL_AGG_MODES,
    GMTSSettings,
    LossSettings,
    TokenBatch,
    answer_weights,
    check_aggregation,
    group_ids,
    method_for_loss_mode,
    select_tokens,
)
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.coefficient import ClipSettings


def test_answer_weights_match_the_library_and_verl_agg_loss():
    lengths = torch.tensor([3, 5, 1, 4])
    assert torch.equal(
        answer_weights(lengths, "token-mean", 6), loss_weights(lengths, "token_mean")
    )
    assert torch.equal(
        answer_weights(lengths, "seq-mean-token-mean", 6),
        loss_weights(lengths, "seq_mean_token_mean"),
    )
    # seq-mean-token-sum-norm divides by the padded horizon (verl's default) or loss_scale_factor
    assert torch.equal(
        answer_weights(lengths, "seq-mean-token-sum-norm", 6),
        loss_weights(lengths, "seq_mean_token_sum_norm", max_length=6),
    )
    assert torch.allclose(
        answer_weights(lengths, "seq-mean-token-sum-norm", 6, loss_scale_factor=10.0),
        torch.full((4,), 1 / 40, dtype=torch.float64),
    )
    assert torch.allclose(
        answer_weights(lengths, "seq-mean-token-sum", 6),
        torch.full((4,), 0.25, dtype=torch.float64),
    )
    # token-sum: every token weighs 1 (verl scales each rank's sum by the data-parallel size)
    assert torch.equal(answer_weights(lengths, "token-sum", 6), torch.ones(4, dtype=torch.float64))
    # G is verl's global_batch_size where given (it counts answers without a token too)
    assert torch.allclose(
        answer_weights(torch.tensor([3, 0, 2]), "seq-mean-token-sum", 6, num_answers=3),
        torch.full((3,), 1 / 3, dtype=torch.float64),
    )
    with pytest.raises(InvalidInputError, match="token-sum"):
        answer_weights(lengths, "seq-sum", 6)


def test_aggregations_are_checked_before_the_micro_batches():
    for mode in VERL_AGG_MODES:
        check_aggregation(mode, loss_scale_factor=256)
    check_aggregation("token-sum")
    with pytest.raises(InvalidInputError, match="loss_scale_factor"):
        check_aggregation("seq-mean-token-sum-norm")
    with pytest.raises(InvalidInputError, match="supported: token-mean, token-sum"):
        check_aggregation("seq-sum")


def test_groups_come_from_uids_not_row_blocks():
    assert group_ids(["b", "a", "b", "c", "a"]).tolist() == [0, 1, 0, 2, 1]


def test_settings_are_checked():
    with pytest.raises(InvalidInputError, match="gmts_ratio"):
        GMTSSettings(ratio=0.0)
    with pytest.raises(InvalidInputError, match="gmts_reselect"):
        GMTSSettings(reselect="epoch")
    with pytest.raises(InvalidInputError, match="GMTS modes"):
        method_for_loss_mode("vanilla")


def test_selection_is_per_group_and_in_the_batch_layout():
    gen = torch.Generator().manual_seed(0)
    uids = ["q1", "q0", "q1", "q0", "q1"]  # interleaved rows, unequal groups
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1]])
    adv = torch.tensor([0.5, -1.0, -0.3, 1.0, 0.8]).unsqueeze(1) * mask
    ent = torch.rand(5, 4, generator=gen) * mask
    logp = -torch.rand(5, 4, generator=gen) * mask
    batch = TokenBatch(mask, ent, logp, logp.clone(), adv, uids)
    sel = select_tokens(
        batch, GMTSSettings("gmts_entropy", 0.25, "group"), LossSettings(ClipSettings())
    )
    assert sel.mask[~mask.bool()].sum() == 0
    for rows in ([1, 3], [0, 2, 4]):  # q0, q1
        n = int(mask[rows].sum())
        assert int(sel.mask[rows].sum()) == math.ceil(0.25 * n)
        # the kept tokens are the group's highest |A| w H
        score = (adv.abs() * ent)[rows][mask[rows].bool()]
        kept = (adv.abs() * ent)[rows][sel.mask[rows]]
        assert kept.min() >= score.sort(descending=True).values[math.ceil(0.25 * n) - 1]
