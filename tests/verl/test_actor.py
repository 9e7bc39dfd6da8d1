"""One real actor update: verl's own TrainingWorker.train_mini_batch / train_batch (mini-batch
iterator, micro-batching, ppo_loss, metrics) with the GMTS hook, on CPU in one process.

verl 0.9.1 registers its training engines (FSDP, Megatron, ...) for cuda/npu only, so the
engine here is tests.verl.engine.TrainableCPUEngine: verl's micro-batching and kernels around a
tiny model. scripts/gpu_check_verl.sh runs the real FSDP engine on a lent GPU.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from verl.utils import tensordict_utils as tu
from verl.workers.utils.losses import ppo_loss

import gmts_core.integrations.verl  # noqa: F401  (registers the GMTS losses, installs the hook)
from gmts_core.integrations import verl_compat as compat
from gmts_core.integrations import verl_selection
from gmts_core.integrations.verl_selection import TokenBatch, select_tokens
from tests.verl.batches import LAYOUTS, VOCAB, actor_config, make_rows, subset, to_tensordict
from tests.verl.engine import rows_stats, training_worker


def _worker(config, seen: list):
    """verl's TrainingWorker whose loss records each micro-batch's rows and advantages."""

    def recording_loss(model_output, data, dp_group=None, config=config):
        adv = data.select("advantages").to_padded_tensor()["advantages"]
        seen.append((data["row_id"].tolist(), adv.detach().clone()))
        return ppo_loss(config, model_output, data, dp_group)

    return training_worker(config, partial(recording_loss, config=config))


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

    assert compat.STATE.selections == 2  # one selection per PPO mini-batch
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
            verl_selection.gmts_settings(config.policy_loss),
            verl_selection.loss_settings(config, 1.0, VOCAB),
        )
        for j, row in enumerate(mini_batch):
            width = applied[row].shape[0]
            assert torch.equal(applied[row], expected.mask[j, :width]), (k, row)
    # the second mini-batch was scored at the updated policy, not the sampling one
    assert not torch.equal(
        rows_stats(snapshots[0], rows)["entropy"], rows_stats(snapshots[1], rows)["entropy"]
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_clip_fractions_count_the_selected_tokens_only(process_group, layout: str):
    """actor/pg_clipfrac and actor/pg_clipfrac_lower are shares of the selected tokens: verl's
    own count (every response token) would add the unselected ones as unclipped."""
    rows = make_rows([4, 6, 6], max_len=7, seed=9)
    every_other = (torch.arange(7) % 2 == 0) * rows.response_mask
    rows.old_log_prob -= 2.0 * every_other  # ratios above the dual clip's c = 3 there
    config = actor_config(
        loss_mode="gmts_paper", gmts_ratio=0.5, clip_ratio_low=0.2, clip_ratio_high=0.28
    )
    worker = training_worker(config, use_dynamic_bsz=False, micro_batch_size=16)  # one
    td = to_tensordict(rows, layout=layout)
    tu.assign_non_tensor(
        td,
        mini_batch_size=16,
        global_batch_size=16,
        epochs=1,
        seed=0,
        dataloader_kwargs={"shuffle": False},
        calculate_entropy=False,
        temperature=1.0,
    )
    metrics = tu.get(worker.train_mini_batch(td), "metrics")
    assert compat.STATE.last is not None
    mask = compat.STATE.last.mask
    logp = rows_stats(worker.engine.snapshots[0], rows)["log_prob"]
    adv = rows.advantages.double()
    ratio = (logp - rows.old_log_prob).clamp(-20, 20).exp().double()
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.28))
    clipped = (-adv * ratio.clamp(0.8, 1.28)) > (-adv * ratio)
    lower = (pg > -adv * 3.0) & (adv < 0)
    share = float(clipped[mask].double().mean())
    share_lower = float(lower[mask].double().mean())
    assert 0 < share < 1 and 0 < share_lower < 1
    assert metrics["actor/pg_clipfrac"] == [pytest.approx(share, abs=1e-6)]
    assert metrics["actor/pg_clipfrac_lower"] == [pytest.approx(share_lower, abs=1e-6)]
    every_token = float((clipped & mask)[rows.response_mask.bool()].double().mean())
    assert every_token < share  # what verl's own metric would have said
