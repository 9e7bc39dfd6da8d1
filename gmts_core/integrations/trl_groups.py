"""Whole groups under TRL's gradient accumulation: a group-scoped selection (``gmts_paper``, or
``selection_scope="group"``) is made once per generation batch, over every answer of each group.

TRL's ``steps_per_generation`` defaults to ``gradient_accumulation_steps``: each generation
batch is shuffled and split into that many micro-batches, so a group of ``num_generations``
answers lands in several of them, and a selection made per micro-batch sees part of a group
(with 8 generations, a per-device batch of 4 and accumulation 2, 3 of 4 groups differed from
Framework1's selection). Here the statistics of the whole generation batch are computed once,
right after it is generated and scored (one extra forward pass, no gradient), the selection is
made over whole groups, and its mask travels with the batch through TRL's shuffle and split
(:data:`WHOLE_GROUP_MASK`); each micro-batch's loss then applies its rows of it.

This is exact where the policy does not change within a generation batch: one optimizer step
per generation batch (``steps_per_generation == gradient_accumulation_steps``) and
``num_iterations == 1``. Otherwise (the policy moves between the micro-batches of one
generation batch) the trainer selects per micro-batch, warns at start and logs
``gmts/split_group_share``.
"""

from __future__ import annotations

from typing import Any

import torch

WHOLE_GROUP_MASK = "gmts_whole_group_mask"  # (B, T) bool: the selection, made over whole groups


def gathers_whole_groups(trainer: Any) -> bool:
    """Whether this generation batch is selected at once, over whole groups (module docstring):
    training, a group scope, groups split across micro-batches, the policy fixed meanwhile."""
    args = trainer.args
    steps = int(getattr(args, "steps_per_generation", 1) or 1)
    return (
        bool(getattr(trainer.model, "training", False))
        and trainer.scope == "group"
        and steps > 1
        and steps == int(args.gradient_accumulation_steps)
        and int(getattr(trainer, "num_iterations", 1)) == 1
    )


def select_whole_groups(trainer: Any, output: dict[str, Any]) -> torch.Tensor:
    """The selection mask (B, T) of this process's rows of the generation batch ``output``,
    made over every process's whole batch: its statistics from one forward pass (TRL's own
    per-token pass, chunked by the per-device batch size), then the trainer's selection."""
    prompt_ids, completion_ids = output["prompt_ids"], output["completion_ids"]
    completion_mask = output["completion_mask"]
    mask = completion_mask * output["tool_mask"] if "tool_mask" in output else completion_mask
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([output["prompt_mask"], completion_mask], dim=1)
    trainer._captured, trainer._capturing, trainer._batch, trainer._hidden = [], True, output, []
    try:
        with torch.no_grad():
            _, entropies, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                input_ids,
                attention_mask,
                completion_ids.size(1),
                batch_size=trainer.args.per_device_train_batch_size,
                compute_entropy=True,
            )
        return trainer.get_high_entropy_mask(entropies, mask, 0.0).detach()
    finally:
        trainer._captured, trainer._capturing, trainer._batch, trainer._hidden = [], False, None, []
