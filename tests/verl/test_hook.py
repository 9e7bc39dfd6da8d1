"""The hook on verl's actor: verl's own forward at the current policy, selection per uid over
the whole mini-batch, the mask carried through verl's dynamic micro-batches."""

from __future__ import annotations

import math

import pytest
import torch
from verl.utils import tensordict_utils as tu
from verl.workers.engine.utils import prepare_micro_batches

import gmts_core.integrations.verl  # noqa: F401  (registers the GMTS losses, installs the hook)
from gmts_core.integrations import verl as plugin
from gmts_core.integrations import verl_compat as compat
from gmts_core.integrations import verl_selection
from gmts_core.integrations.verl_selection import select_tokens
from gmts_core.methods import gmts_released as paper
from tests.verl.batches import VOCAB, actor_config, make_rows, to_tensordict
from tests.verl.engine import cpu_worker, row_token_batch


def _expected(worker, rows, config):
    """The selection computed without verl's micro-batching, from per-row statistics."""
    batch = row_token_batch(worker.engine.model, rows)
    return select_tokens(
        batch,
        verl_selection.gmts_settings(config.policy_loss),
        verl_selection.loss_settings(config, 1.0, VOCAB),
    )


@pytest.mark.parametrize("method", ["gmts", "gmts_paper"])
def test_dynamic_batches_do_not_misalign_scores(method: str):
    rows = make_rows([16, 16, 16, 16], max_len=9, seed=1)  # 64 rows, shuffled groups
    config = actor_config(loss_mode=method, use_dynamic_bsz=True)
    worker = cpu_worker(config, max_token_len=30)
    td = to_tensordict(rows)
    plugin.apply_selection(worker, td, config)

    order = [i for mb in worker.engine.micro_batch_orders for i in mb]
    assert order != sorted(order)  # verl really reordered the rows of the pre-pass
    expected = _expected(worker, rows, config)
    adv = td.select("advantages").to_padded_tensor()["advantages"]
    assert torch.equal(adv != 0, expected.mask)  # mask on the right rows (A != 0 everywhere)
    torch.testing.assert_close(adv, rows.advantages * expected.mask)

    # the training pass: verl's own dynamic split (with the keys train_batch injects) carries
    # the mask with its rows
    tu.assign_non_tensor(td, **compat.engine_defaults(worker))
    micro_batches, indices = prepare_micro_batches(td, dp_group=None, same_micro_num_in_dp=False)
    assert [i for mb in indices for i in mb] != list(range(len(rows.uids)))
    for mb in micro_batches:
        mb_adv = mb.select("advantages").to_padded_tensor()["advantages"]
        for j, row in enumerate(mb["row_id"].tolist()):
            width = mb_adv.shape[1]
            assert torch.equal(mb_adv[j] != 0, expected.mask[row, :width])


@pytest.mark.parametrize("method", ["gmts_paper_verl", "gmts_paper", "gmts"])
def test_every_group_of_a_64_row_mini_batch_is_filtered(method: str):
    rows = make_rows([16, 16, 16, 16], max_len=9, seed=2)
    config = actor_config(loss_mode=method, gmts_ratio=0.2)
    worker = cpu_worker(config)
    td = to_tensordict(rows)
    sel = plugin.apply_selection(worker, td, config)
    valid = rows.response_mask.bool()
    for uid in sorted(set(rows.uids)):
        in_group = torch.tensor([u == uid for u in rows.uids])
        n = int(valid[in_group].sum())
        kept = int(sel.mask[in_group].sum())
        assert 0 < kept < n  # this group is filtered
        if method == "gmts_paper":  # Framework1: the lowest max(1, ceil(0.8 n)) removed
            assert kept == paper.framework1_kept(n, 0.2)
        elif method == "gmts":
            assert kept == math.ceil(0.2 * n)
        else:  # Framework2: strictly above the int(0.8 n)-th smallest non-zero score
            assert kept <= n - int(0.8 * n)
    # the released fork's loop, for contrast: `for i in range(0, rows // 16, 16)` over blocks
    # of 16 rows visits only the first block of a 64-row mini-batch: one group in four
    assert len(range(0, 64 // 16, 16)) == 1


def test_unequal_groups_and_partial_groups():
    rows = make_rows([3, 9, 1, 6], max_len=7, seed=4)
    config = actor_config(loss_mode="gmts_entropy", gmts_ratio=0.3)
    worker = cpu_worker(config, max_token_len=16)
    td = to_tensordict(rows)
    sel = plugin.apply_selection(worker, td, config)
    valid = rows.response_mask.bool()
    for uid in set(rows.uids):
        in_group = torch.tensor([u == uid for u in rows.uids])
        assert int(sel.mask[in_group].sum()) == math.ceil(0.3 * int(valid[in_group].sum()))
    assert torch.equal(sel.mask, _expected(worker, rows, config).mask)


def test_reselect_per_mini_batch_or_once_per_step():
    calls = []

    class Worker:
        def __init__(self, config):
            self.__dict__.update(vars(cpu_worker(config)))

        def train_batch(self, data):
            calls.append(("train_batch", data["advantages"].clone()))

        def train_mini_batch(self, data):
            for half in tu.chunk_tensordict(data, 2):
                self.train_batch(half)

    plugin.install_hook(Worker)
    rows = make_rows([4, 4], max_len=5, seed=6, shuffle=False)
    for reselect, selections in (("mini_batch", 2), ("step", 1)):
        compat.STATE.selections = 0
        config = actor_config(loss_mode="gmts_paper", gmts_reselect=reselect)
        Worker(config).train_mini_batch(to_tensordict(rows))
        assert compat.STATE.selections == selections
    assert compat.STATE.steps == 2


def test_selection_log_opens_in_the_runs_reader(tmp_path):
    from gmts_core.runs import open_run

    rows = make_rows([4, 4, 4], max_len=6, seed=7)
    config = actor_config(loss_mode="gmts_paper", gmts_log_dir=str(tmp_path))
    worker = cpu_worker(config)

    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return " ".join(f"t{i}" for i in ids)

    worker.model_config.tokenizer = Tok()
    td = to_tensordict(rows)
    sel = plugin.apply_selection(worker, td, config)
    path = worker._gmts_log.flush(1)
    assert path is not None and path.name == "selection_00001.parquet"
    # verl's own {step}.jsonl sits next to it in rollout_data_dir; the token log is read first
    (tmp_path / "1.jsonl").write_text('{"input": "a", "output": "b", "score": 1.0, "step": 1}\n')
    run = open_run(tmp_path)
    assert run.format == "gmts_trainer_log" and run.steps == [1]
    step = run.step(1)
    assert len(step.groups) == 3
    trained = sum(sum(map(bool, a)) for g in step.groups for a in g.token_columns["selected"])
    assert trained == int(sel.mask.sum())


def test_content_budget_leaves_the_tokenizers_special_tokens_out():
    """gmts_budget_over=content through the hook: response tokens that are the tokenizer's
    special tokens (two ids made special here) are never selected and take no share of any
    group's k; the selection equals verl_selection's with those tokens flagged."""
    rows = make_rows([4, 4, 4], max_len=6, seed=7)
    config = actor_config(loss_mode="gmts_entropy", gmts_ratio=0.5, gmts_budget_over="content")
    worker = cpu_worker(config)
    special = [int(rows.responses[0, 0]), int(rows.responses[1, 0])]

    class Tok:
        all_special_ids = special

    worker.model_config.tokenizer = Tok()
    sel = plugin.apply_selection(worker, to_tensordict(rows), config)
    valid = rows.response_mask.bool()
    flagged = torch.isin(rows.responses, torch.tensor(special)) & valid
    assert flagged.any() and not sel.mask[flagged].any()
    for uid in set(rows.uids):
        in_group = torch.tensor([u == uid for u in rows.uids])
        counted = int((valid & ~flagged)[in_group].sum())
        assert int(sel.mask[in_group].sum()) == math.ceil(0.5 * counted)
