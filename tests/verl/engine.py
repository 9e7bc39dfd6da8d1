"""A one-process CPU stand-in for verl's FSDP engine (verl 0.9.1 registers its engines for
cuda/npu only): verl's own micro-batching (``prepare_micro_batches``: dynamic batch sizes
reorder rows), verl's own entropy / log-prob / sum pi^2 kernels, and verl's own
``postprocess_batch_func`` (restores the row order), around a model whose logits depend only on
the current token (so every row's numbers are known without the engine)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

import torch
import verl.utils.torch_functional as verl_F
from verl.workers.engine.utils import postprocess_batch_func, prepare_micro_batches
from verl.workers.utils.losses import ppo_loss

from gmts_core.integrations.verl_selection import TokenBatch
from tests.verl.batches import VOCAB, Rows


class TokenModel(torch.nn.Module):
    """logits(token) = a learned (V, V) table row: deterministic, trainable, order-free."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(VOCAB, VOCAB, generator=gen) * 1.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids]  # (n, V)


def model_outputs(model: TokenModel, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """verl's output fields for jagged ``input_ids``: log pi of the next token, H, sum pi^2."""
    values, offsets = input_ids.values(), input_ids.offsets()
    logits = model(values)  # (nnz, V)
    labels = torch.roll(values, shifts=-1)  # next token (the last one of a row is unused)
    out = {
        "log_probs": verl_F.logprobs_from_logits(logits, labels),
        "entropy": verl_F.entropy_from_logits(logits),
        "sum_pi_squared": verl_F.calculate_sum_pi_squared_from_logits(logits),
    }
    return {k: torch.nested.nested_tensor_from_jagged(v, offsets) for k, v in out.items()}


@dataclass
class CPUEngine:
    model: TokenModel
    micro_batch_orders: list[list[int]] | None = None  # rows of each micro-batch, last call

    def train_mode(self, **_: Any):
        return contextlib.nullcontext()

    def get_data_parallel_group(self) -> None:
        return None

    def infer_batch(self, data: Any, loss_function: Any = None) -> dict[str, Any]:
        micro_batches, indices = prepare_micro_batches(
            data, dp_group=None, same_micro_num_in_dp=False
        )
        self.micro_batch_orders = indices
        outs = []
        with torch.no_grad():
            for mb in micro_batches:
                outs.append(
                    {"model_output": model_outputs(self.model, mb["input_ids"]), "loss": 0.0}
                )
        return postprocess_batch_func(outs, indices, data)


class ModelConfig(dict):
    hf_config = SimpleNamespace(vocab_size=VOCAB)


def cpu_worker(config: Any, max_token_len: int = 20, seed: int = 0) -> SimpleNamespace:
    """The parts of verl's TrainingWorker the GMTS hook reads."""
    return SimpleNamespace(
        engine=CPUEngine(TokenModel(seed)),
        loss_fn=partial(ppo_loss, config=config),
        engine_config=SimpleNamespace(
            use_dynamic_bsz=True,
            max_token_len_per_gpu=max_token_len,
            micro_batch_size_per_gpu=2,
            use_fused_kernels=False,
        ),
        model_config=ModelConfig(use_remove_padding=True),
    )


def rows_stats(model: TokenModel, rows: Rows) -> dict[str, torch.Tensor]:
    """The same fields computed row by row on the padded rows, no micro-batching: (B, T)."""
    b, t = rows.response_mask.shape
    p = rows.prompts.shape[1]
    out = {k: torch.zeros(b, t) for k in ("log_prob", "entropy", "sum_pi_squared")}
    with torch.no_grad():
        for i in range(b):
            n = int(rows.response_mask[i].sum())
            seq = torch.cat([rows.prompts[i], rows.responses[i, :n]])
            logits = model(seq[p - 1 : p - 1 + n])  # predicting response tokens 0..n-1
            out["log_prob"][i, :n] = torch.log_softmax(logits, -1).gather(-1, seq[p : p + n, None])[
                :, 0
            ]
            probs = torch.softmax(logits, -1)
            out["entropy"][i, :n] = -(probs * torch.log_softmax(logits, -1)).sum(-1)
            out["sum_pi_squared"][i, :n] = probs.square().sum(-1)
    return out


class TrainableCPUEngine(CPUEngine):
    """Adds the training half: verl's micro-batching, ``loss_function`` (verl's ppo_loss) per
    micro-batch, backward, one optimizer step per mini-batch (as verl's FSDP engine)."""

    def __init__(self, model: TokenModel, lr: float = 0.5) -> None:
        super().__init__(model)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self.snapshots: list[TokenModel] = []  # the policy each mini-batch started from
        self.grads: list[torch.Tensor] = []  # each mini-batch's accumulated gradient
        self.micro_batches: list[int] = []  # each mini-batch's number of micro-batches

    def get_data_parallel_size(self) -> int:
        return 1

    def get_data_parallel_rank(self) -> int:
        return 0

    def is_mp_src_rank_with_outputs(self) -> bool:
        return True

    def lr_scheduler_step(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def train_batch(self, data: Any, loss_function: Any) -> dict[str, Any]:
        import copy

        from verl.utils import tensordict_utils as tu

        self.snapshots.append(copy.deepcopy(self.model))
        tu.assign_non_tensor(data, batch_num_tokens=int(data["loss_mask"].sum()), dp_size=1)
        micro_batches, indices = prepare_micro_batches(
            data, dp_group=None, same_micro_num_in_dp=False
        )
        self.micro_batches.append(len(micro_batches))
        self.optimizer.zero_grad()
        outs = []
        for mb in micro_batches:
            model_output = model_outputs(self.model, mb["input_ids"])
            loss, metrics = loss_function(model_output=model_output, data=mb, dp_group=None)
            loss.backward()
            outs.append({"loss": loss.item(), "metrics": metrics})
        self.grads.append(self.model.table.grad.detach().clone())
        self.optimizer.step()
        output = postprocess_batch_func(outs, indices, data)
        # the worker all-gathers the metrics over its data-parallel group (none here): one rank
        output["metrics"] = {k: [v] for k, v in output["metrics"].items()}
        output["metrics"]["grad_norm"] = torch.tensor(0.0)
        return output


def training_worker(
    config: Any,
    loss_fn: Any = None,
    use_dynamic_bsz: bool = True,
    micro_batch_size: int = 2,
    max_token_len: int = 30,
    seed: int = 0,
) -> Any:
    """verl's own TrainingWorker around a :class:`TrainableCPUEngine`, without its engine
    factory (verl 0.9.1 has no CPU engine); ``loss_fn`` defaults to verl's ppo_loss."""
    from verl.workers.engine_workers import TrainingWorker

    w = object.__new__(TrainingWorker)
    w.engine = TrainableCPUEngine(TokenModel(seed))
    w.loss_fn = loss_fn or partial(ppo_loss, config=config)  # the hook reads keywords["config"]
    w.engine_config = SimpleNamespace(
        use_dynamic_bsz=use_dynamic_bsz,
        max_token_len_per_gpu=max_token_len,
        micro_batch_size_per_gpu=micro_batch_size,
        use_fused_kernels=False,
        forward_only=False,
    )
    w.model_config = ModelConfig(use_remove_padding=True)
    w.flops_counter, w.device_name = None, "cpu"
    w.profiler = SimpleNamespace(
        step=lambda: None,
        rank=0,
        check_enable=lambda: False,
        check_this_step=lambda: False,
        check_this_rank=lambda: False,
    )
    return w


def row_token_batch(
    model: TokenModel, rows: Rows, with_ref: bool = False, num_answers: int | None = None
) -> TokenBatch:
    """The selection's inputs for ``rows`` from :func:`rows_stats` (no micro-batching): what
    the plugin's selection must equal however verl splits the rows."""
    s = rows_stats(model, rows)
    return TokenBatch(
        rows.response_mask,
        s["entropy"],
        s["log_prob"],
        rows.old_log_prob,
        rows.advantages,
        rows.uids,
        rows.ref_log_prob if with_ref else None,
        s["sum_pi_squared"],
        num_answers=num_answers,
    )
