"""Loss-aggregation weights w_i: token_mean, seq_mean_token_mean, seq_mean_token_sum_norm."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from gmts_core.errors import UnknownNameError
from gmts_core.methods.aggregation import list_aggregations, loss_weights

LENGTHS = [3, 7, 1, 5]


def test_registry_lists_the_three_modes() -> None:
    assert set(list_aggregations()) == {
        "token_mean",
        "seq_mean_token_mean",
        "seq_mean_token_sum_norm",
    }


def test_token_mean_weighs_every_token_the_same() -> None:
    w = loss_weights(torch.tensor(LENGTHS), "token_mean")
    assert w.dtype == torch.float64
    assert_close(w, torch.full((4,), 1 / 16, dtype=torch.float64))
    assert float((w * torch.tensor(LENGTHS)).sum()) == pytest.approx(1.0)  # total token weight 1


def test_seq_mean_token_mean_weighs_every_answer_the_same() -> None:
    w = loss_weights(torch.tensor(LENGTHS), "seq_mean_token_mean")
    assert_close(w, torch.tensor([1 / (4 * n) for n in LENGTHS], dtype=torch.float64))
    assert_close(w * torch.tensor(LENGTHS), torch.full((4,), 0.25, dtype=torch.float64))


def test_seq_mean_token_sum_norm_is_constant() -> None:
    w = loss_weights(torch.tensor(LENGTHS), "seq_mean_token_sum_norm")
    assert_close(w, torch.full((4,), 1 / (4 * 7), dtype=torch.float64))
    w_max = loss_weights(torch.tensor(LENGTHS), "seq_mean_token_sum_norm", max_length=64)
    assert_close(w_max, torch.full((4,), 1 / (4 * 64), dtype=torch.float64))


def test_unknown_mode_lists_valid() -> None:
    with pytest.raises(UnknownNameError, match="seq_mean_token_mean.*token_mean"):
        loss_weights(torch.tensor(LENGTHS), "sum")
