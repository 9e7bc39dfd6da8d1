"""Verifiable tasks with known fork points; the arithmetic task trains the bundled demo model."""

from __future__ import annotations

from gmts_core.tasks.arith import (
    ArithProblem,
    ExamplePrompt,
    example_prompts,
    find_fork_spans,
    fork_token_mask,
    generate_problems,
    make_problem,
)

__all__ = [
    "ArithProblem",
    "ExamplePrompt",
    "example_prompts",
    "find_fork_spans",
    "fork_token_mask",
    "generate_problems",
    "make_problem",
]
