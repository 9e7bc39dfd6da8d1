"""Loss-aggregation weights w_i (a registry).

The GRPO policy-gradient loss is L = -sum_i sum_t w_i A_i m_it log pi(y_it); the aggregation
mode decides w_i. Each function takes the answer lengths |o_i| of one group, shape (G,), and
the longest length in the batch L_max (for `seq_mean_token_sum_norm`; defaults to max |o_i|),
and returns w, shape (G,).
"""

from __future__ import annotations

from typing import Protocol

import torch

from gmts_core.registry import Registry


class AggregationFn(Protocol):
    def __call__(
        self, lengths: torch.Tensor, num_answers: int, max_length: int
    ) -> torch.Tensor: ...


AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")


@AGGREGATIONS.register("token_mean")
def token_mean_weights(lengths: torch.Tensor, num_answers: int, max_length: int) -> torch.Tensor:
    """w_i = 1 / sum_j |o_j| (DAPO; TRL's default): every token weighs the same."""
    total = lengths.sum().clamp_min(1).double()
    return torch.full_like(lengths, 1.0, dtype=torch.float64) / total


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean_weights(
    lengths: torch.Tensor, num_answers: int, max_length: int
) -> torch.Tensor:
    """w_i = 1 / (G |o_i|) (original GRPO): each answer weighs the same."""
    return 1.0 / (num_answers * lengths.clamp_min(1).double())


@AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm_weights(
    lengths: torch.Tensor, num_answers: int, max_length: int
) -> torch.Tensor:
    """w_i = 1 / (G L_max) (Dr. GRPO): a constant, so no length bias."""
    return torch.full_like(lengths, 1.0, dtype=torch.float64) / (num_answers * max(max_length, 1))


def loss_weights(
    lengths: torch.Tensor, mode: str = "token_mean", max_length: int | None = None
) -> torch.Tensor:
    """Per-answer weights w (float64, shape (G,)) for the aggregation ``mode``."""
    lmax = int(lengths.max()) if max_length is None and lengths.numel() else (max_length or 0)
    return AGGREGATIONS.get(mode)(lengths, int(lengths.numel()), lmax)


def list_aggregations() -> list[str]:
    return AGGREGATIONS.names()
