"""Every registered run format's fixture (tests/data/runs), and which of them carry a loss mask or
per-token numbers of their own: the registry-driven lists the loss-mask property test and the
Runs tab's browser test walk (a new reader fails their tests until it names its fixture here)."""

from __future__ import annotations

from pathlib import Path

from gmts_core.runs import open_run
from gmts_core.runs.logged_tokens import logged_tokens
from gmts_core.runs.token_samples import trained_mask

DATA = Path(__file__).resolve().parent / "data" / "runs"
FIXTURES = {
    "gmts_trainer_log": DATA / "logged",
    "trl": DATA / "trl",
    "prime_rl": DATA / "prime_rl",
    "nemo_rl": DATA / "nemo_rl",
    "open_instruct": DATA / "open_instruct",
    "roll": DATA / "roll",
    "verl": DATA / "verl",
    "areal": DATA / "areal",
    "miles": DATA / "miles",
    "slime": DATA / "slime",
    "jsonl": DATA / "run.jsonl",
}


def first_step_traits(path: Path) -> tuple[int, int, int | None, bool]:
    """(first step, number of steps, masked tokens in the first step or None where its groups
    carry no loss mask, whether the first step logs per-token numbers)."""
    run = open_run(path)
    step = run.step(run.steps[0])
    masks = [trained_mask(g) for g in step.groups]
    masked = None
    if any(m is not None for m in masks):
        masked = sum(not t for m in masks if m for answer in m for t in answer)
    return run.steps[0], len(run.steps), masked, logged_tokens(step) is not None
