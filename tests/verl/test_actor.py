"""One real actor update: verl's own TrainingWorker.train_mini_batch / train_batch (mini-batch
iterator, micro-batching, ppo_loss, metrics) with the GMTS hook, on CPU in one process.

verl 0.9.1 registers its training engines (FSDP, Megatron, ...) for cuda/npu only, so the
engine here is tests.verl.engine.TrainableCPUEngine: verl's micro-batching and kernels around a
tiny model. scripts/gpu_check_verl.sh runs the real FSDP engine on a lent GPU.
"""

from __future__ import annotations

import tempfile
from functools import partial
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import TrainingWorker
from verl.workers.utils.losses import ppo_loss

from gmts_core.integrations import verl as plugin
from gmts_core.integrations.verl_terms import TokenBatch, select_tokens
from tests.verl.batches import VOCAB, actor_config, make_rows, subset, to_tensordict
from tests.verl.engine import ModelConfig, TokenModel, TrainableCPUEngine, rows_stats


@pytest.fixture(scope="module")
def process_group():
    """A one-process gloo group (train_mini_batch all-gathers token counts over DP)."""
    if not dist.is_initialized():
        store = tempfile.NamedTemporaryFile(delete=False).name
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _worker(config, seen: list) -> TrainingWorker:
    """verl's TrainingWorker without its engine factory (no CPU engine in verl)."""

    def recording_loss(model_output, data, dp_group=None, config=config):
        adv = data.select("advantages").to_padded_tensor()["advantages"]
        seen.append((data["row_id"].tolist(), adv.detach().clone()))
        return ppo_loss(config, model_output, data, dp_group)

    w = object.__new__(TrainingWorker)
    w.engine = TrainableCPUEngine(TokenModel(0))
    w.loss_fn = partial(recording_loss, config=config)  # the hook reads keywords["config"]
    w.engine_config = SimpleNamespace(
        use_dynamic_bsz=True,
        max_token_len_per_gpu=30,
        micro_batch_size_per_gpu=2,
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


def test_actor_update_applies_the_library_selection(process_group):
    rows = make_rows([8, 8, 8, 8], max_len=7, seed=3)  # 32 rows; mini-batches of 16
    config = actor_config(loss_mode="gmts_paper", use_dynamic_bsz=True)
    seen: list = []
    worker = _worker(config, seen)
    td = to_tensordict(rows)
    tu.assign_non_tensor(
        td,
        mini_batch_size=16,
        epochs=1,
        seed=0,
        dataloader_kwargs={"shuffle": False},
        global_batch_size=16,
        calculate_entropy=False,
        temperature=1.0,
    )
    before = {k: v.clone() for k, v in worker.engine.model.state_dict().items()}
    output = worker.train_mini_batch(td)

    assert plugin.STATE.selections == 2  # one selection per PPO mini-batch
    assert not torch.equal(before["table"], worker.engine.model.table)  # the update happened
    assert "actor/gmts_selected_fraction" in tu.get(output, "metrics")
    snapshots = worker.engine.snapshots  # the policy at the start of each mini-batch
    assert len(snapshots) == 2
    applied = {}
    for row_ids, adv in seen:
        for j, row in enumerate(row_ids):
            applied[row] = adv[j] != 0
    for k, mini_batch in enumerate((list(range(16)), list(range(16, 32)))):
        part = subset(rows, mini_batch)
        s = rows_stats(snapshots[k], part)  # statistics at that mini-batch's current policy
        batch = TokenBatch(
            part.response_mask,
            s["entropy"],
            s["log_prob"],
            part.old_log_prob,
            part.advantages,
            part.uids,
            None,
            s["sum_pi_squared"],
        )
        expected = select_tokens(
            batch,
            plugin.gmts_settings(config.policy_loss),
            plugin.loss_settings(config, 1.0, VOCAB),
        )
        for j, row in enumerate(mini_batch):
            width = applied[row].shape[0]
            assert torch.equal(applied[row], expected.mask[j, :width]), (k, row)
    # the second mini-batch was scored at the updated policy, not the sampling one
    assert not torch.equal(
        rows_stats(snapshots[0], rows)["entropy"], rows_stats(snapshots[1], rows)["entropy"]
    )
