"""The token log of ``GMTSGRPOTrainer(log_selection=True)``: what each loss step trained on.

After every selection (one per loss call) :class:`SelectionLogger` gathers, in the order of
the selection's global batch (process, answer, position), each completion token's id, its
advantage, and the prompt and completion texts of its answer; the main process keeps them
with the selection's own numbers (entropy, g, gamma, the applied mask, and what entropy and
GMTS selection would keep at the same ratio). At each logging step the rows since the previous
one are written to ``OUTPUT_DIR/gmts_selection/selection_{step:05d}.parquet``, next to TRL's
``completions/completions_{step:05d}.parquet``, in the schema of
:mod:`gmts_core.runs.trainer_log` (which reads them back).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import torch

from gmts_core.integrations.trl_selection import gather_rows
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.selection import select
from gmts_core.runs.trainer_log import FOLDER, SCHEMA, write_log_step

if TYPE_CHECKING:
    from gmts_core.integrations.trl_selection import AppliedSelection

logger = logging.getLogger(__name__)

# names an effective-coefficient tensor (N,) may have on the applied selection, once computed
_OMEGA_ATTRS = ("omega", "coefficient", "coef")


class SelectionLogger:
    """Collects the per-token rows of every selection; writes them at each logging step."""

    def __init__(self, output_dir: str | Path) -> None:
        self.folder = Path(output_dir) / FOLDER
        self._tables: list[pa.Table] = []

    def record(self, trainer: Any, applied: AppliedSelection, batch: dict[str, Any]) -> None:
        """Called on every process after a selection (the gathers are collective)."""
        from accelerate.utils import gather_object  # the optional [trl] extra

        valid = _valid_mask(batch)
        local = torch.stack(
            [
                batch["completion_ids"][valid].double(),
                _per_token(batch["advantages"], valid).double(),
            ],
            dim=1,
        )  # (n, 2): token id and advantage of each valid token
        rows, _ = gather_rows(trainer.accelerator, local)
        texts = gather_object(_answer_texts(trainer.processing_class, batch, valid))
        if not trainer.accelerator.is_main_process:
            return
        self._tables.append(self._table(trainer, applied, rows.cpu(), texts))

    def _table(
        self, trainer: Any, applied: AppliedSelection, rows: torch.Tensor, texts: list[Any]
    ) -> pa.Table:
        x, sel = applied.inputs, applied.selection
        ratio, method = trainer.selection_ratio, trainer.token_selection
        by = {
            m: sel.selected if method == m else select(x, m, ratio, trainer.scope).selected
            for m in ("entropy", "gmts")
        }
        answer = x.answer_index.long()
        lengths = torch.bincount(answer, minlength=int(answer.max()) + 1 if len(answer) else 0)
        weights = loss_weights(
            lengths, trainer.aggregation, max_length=trainer.max_completion_length
        )[answer]
        starts = torch.cumsum(lengths, 0) - lengths
        omega = next(
            (getattr(applied, a) for a in _OMEGA_ATTRS if getattr(applied, a, None) is not None),
            None,
        )
        n = x.num_tokens
        cols = {
            "step": [int(trainer.state.global_step)] * n,
            "micro_batch": [len(self._tables)] * n,
            "answer": answer.tolist(),
            "position": (torch.arange(n) - starts[answer]).tolist(),
            "prompt": [texts[a][0] for a in answer.tolist()],
            "completion": [texts[a][1] for a in answer.tolist()],
            "token_id": rows[:, 0].long().tolist(),
            "entropy": x.entropy.tolist(),
            "logprob": x.logprob.tolist(),
            "grad_norm": x.grad_norm.tolist(),
            "grad_proxy": x.grad_proxy.tolist(),
            "advantage": rows[:, 1].tolist(),
            "weight": weights.double().tolist(),
            "omega": omega.double().cpu().tolist() if omega is not None else [None] * n,
            "method": [method] * n,
            "selected": sel.selected.tolist(),
            "selected_entropy": by["entropy"].tolist(),
            "selected_gmts": by["gmts"].tolist(),
        }
        return pa.table(cols, schema=SCHEMA)

    def flush(self, step: int) -> Path | None:
        """Write the rows since the last flush as this logging step's file (main process)."""
        path = write_log_step(self.folder, self._tables, step)
        self._tables = []
        return path


def _valid_mask(batch: dict[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss covers: the completion mask (times the tool mask), (B, T) bool."""
    mask = batch["completion_mask"]
    if "tool_mask" in batch:
        mask = mask * batch["tool_mask"]
    return mask.bool()


def _per_token(advantages: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    return adv.expand_as(valid)[valid]


def _answer_texts(
    tokenizer: Any, batch: dict[str, Any], valid: torch.Tensor
) -> list[tuple[str, str]]:
    """(prompt, completion) text of every local answer (row), in row order: the selection's
    answer index counts rows, those without valid tokens included."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wraps its tokenizer
    out = []
    for row in range(valid.shape[0]):
        prompt_ids = batch["prompt_ids"][row][batch["prompt_mask"][row].bool()]
        out.append(
            (
                tok.decode(prompt_ids.tolist(), skip_special_tokens=True),
                tok.decode(
                    batch["completion_ids"][row][valid[row]].tolist(), skip_special_tokens=True
                ),
            )
        )
    return out
