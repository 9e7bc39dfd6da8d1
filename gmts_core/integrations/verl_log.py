"""The token log of a verl run trained with a GMTS loss mode: what each mini-batch trained on.

The first data-parallel rank keeps every selection of a training step (all ranks' rows: the
selection is made on the gathered mini-batch) and, after the step, writes
``gmts_log_dir/gmts_selection/selection_{step:05d}.parquet`` in the schema of
:mod:`gmts_core.runs.trainer_log` -- the reader the Runs tab tries first -- so a
``trainer.rollout_data_dir`` holding verl's ``{step}.jsonl`` and this folder opens as the
tokens each step actually trained (``selected``), next to what entropy and GMTS selection
would keep at the same ratio. ``micro_batch`` numbers the selections (PPO mini-batches) of
the step. No verl import: the selections arrive as arguments.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import torch

from gmts_core.integrations.verl_selection import TokenSelection
from gmts_core.knobs import DEFAULT_RATIO
from gmts_core.methods.selection import select
from gmts_core.runs.trainer_log import FOLDER, SCHEMA, write_log_step


class VerlSelectionLog:
    """Collects the selections of a step; :meth:`flush` writes them as the step's file."""

    def __init__(
        self, log_dir: str | Path, ratio: float = DEFAULT_RATIO, scope: str = "group"
    ) -> None:
        self.folder = Path(log_dir) / FOLDER
        self.ratio, self.scope = ratio, scope
        self._tables: list[pa.Table] = []

    def record(
        self, selection: TokenSelection, responses: torch.Tensor, texts: list[tuple[str, str]]
    ) -> None:
        """Add one selection; ``responses`` (B, T) ids and ``texts`` are in the batch's rows."""
        x, sel = selection.inputs, selection.selection
        order = selection.order
        n_valid = torch.bincount(x.answer_index, minlength=len(order))  # tokens per flat row
        token_ids = torch.cat(
            [responses[row][selection.valid[row]] for row in order.tolist()]
        )  # (N,) in flat order
        starts = torch.cumsum(n_valid, 0) - n_valid
        answer = x.answer_index
        by = {m: select(x, m, self.ratio, self.scope).selected for m in ("entropy", "gmts")}
        n = x.num_tokens
        row_of = order[answer]
        cols = {
            "step": [0] * n,
            "micro_batch": [len(self._tables)] * n,
            "answer": answer.tolist(),
            "position": (torch.arange(n) - starts[answer]).tolist(),
            "prompt": [texts[r][0] for r in row_of.tolist()],
            "completion": [texts[r][1] for r in row_of.tolist()],
            "token_id": token_ids.tolist(),
            "entropy": x.entropy.tolist(),
            "logprob": x.logprob.tolist(),
            "grad_norm": torch.nan_to_num(x.grad_norm, nan=0.0).tolist(),
            "grad_proxy": torch.nan_to_num(x.grad_proxy, nan=0.0).tolist(),
            "advantage": (x.advantage if x.advantage is not None else x.entropy * 0).tolist(),
            "weight": selection.weight.tolist(),
            "omega": x.coef.tolist() if x.coef is not None else [None] * n,
            "method": [sel.method] * n,
            "selected": sel.selected.tolist(),
            "selected_entropy": by["entropy"].tolist(),
            "selected_gmts": by["gmts"].tolist(),
        }
        self._tables.append(pa.table(cols, schema=SCHEMA))

    def flush(self, step: int) -> Path | None:
        """Write the selections since the last flush as step ``step``'s file."""
        path = write_log_step(self.folder, self._tables, step)
        self._tables = []
        return path
