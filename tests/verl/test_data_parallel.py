"""Two data-parallel ranks (two gloo processes): groups split across ranks are selected as one
group, and each rank masks exactly its own rows of the whole mini-batch's selection."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gmts_core.integrations.verl  # noqa: F401  (registers the GMTS losses, installs the hook)
from gmts_core.integrations import verl as plugin
from tests.verl.batches import actor_config, make_rows, subset, to_tensordict
from tests.verl.engine import cpu_worker

ROWS = dict(group_sizes=[5, 7, 4], max_len=6, seed=11)  # shuffled: every group on both ranks


def _rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        rows = make_rows(**ROWS)
        half = len(rows.uids) // 2
        mine = list(range(half)) if rank == 0 else list(range(half, len(rows.uids)))
        config = actor_config(loss_mode="gmts_paper_verl", gmts_ratio=0.3)
        worker = cpu_worker(config)
        td = to_tensordict(subset(rows, mine))
        plugin.apply_selection(worker, td, config)
        adv = td.select("advantages").to_padded_tensor()["advantages"]
        torch.save({"rows": mine, "kept": adv != 0}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_groups_across_ranks_are_selected_whole(tmp_path):
    mp.start_processes(
        _rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, start_method="spawn"
    )
    rows = make_rows(**ROWS)
    half = len(rows.uids) // 2
    assert set(rows.uids[:half]) == set(rows.uids[half:]) == set(rows.uids)  # groups span ranks
    config = actor_config(loss_mode="gmts_paper_verl", gmts_ratio=0.3)
    whole = plugin.apply_selection(cpu_worker(config), to_tensordict(rows), config)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        width = got["kept"].shape[1]
        assert torch.equal(got["kept"], whole.mask[got["rows"], :width]), rank
