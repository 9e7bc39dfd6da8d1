"""Which tokens a selection's budget counts, and which a method may select (``budget_over``).

A selection keeps k = ceil(ratio * n) tokens of each scope. What n counts is a rule:

- ``trained`` (the default): the tokens the trainer's loss counts (its loss mask; every answer
  token where the trainer has none). A tool output, an environment message (mask 0) is never
  selected and counts in no budget. The paper's and Framework1's rule where there is no mask.
- ``content``: the trained tokens that are content, i.e. not one of the tokenizer's special
  tokens (``tokenizer.all_special_ids``: the chat template's markers such as ``<|im_end|>``,
  EOS, tool-call tags registered as special tokens). Template and format tokens then neither
  compete for the budget nor take a share of it; they stay trained by the loss where it
  trains unselected tokens (a selection that masks the loss drops their gradient).
- ``all``: every answer token counts in the budget, as a trainer without a loss mask counts it;
  the untrained ones (and nothing else) are still never selected, so the selection may keep
  fewer than k where many tokens are masked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import torch

from gmts_core.errors import InvalidInputError
from gmts_core.knobs import BUDGET_OVER as BUDGET_OVER
from gmts_core.methods.selection import SelectionInputs


def check_budget_over(name: str) -> str:
    if name not in BUDGET_OVER:
        raise InvalidInputError(f"unknown budget_over {name!r}; valid: {', '.join(BUDGET_OVER)}")
    return name


def special_ids(tokenizer: Any) -> frozenset[int]:
    """The tokenizer's special token ids (chat-template markers, EOS, BOS, pad...)."""
    return frozenset(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))


def special_mask(token_ids: torch.Tensor | Iterable[int], special: frozenset[int]) -> torch.Tensor:
    """bool (N,): which of the flat ``token_ids`` are special."""
    ids = torch.as_tensor(list(token_ids) if not torch.is_tensor(token_ids) else token_ids)
    if not special or ids.numel() == 0:
        return torch.zeros(ids.numel(), dtype=torch.bool)
    return torch.isin(ids.reshape(-1).cpu(), torch.tensor(sorted(special), dtype=ids.dtype))


def flat_ids(sequences: Sequence[Sequence[int]]) -> torch.Tensor:
    """The answers' token ids, flat in answer order (the selection inputs' order)."""
    return torch.tensor([t for ids in sequences for t in ids], dtype=torch.long)


def with_budget(
    x: SelectionInputs, budget_over: str, special: torch.Tensor | None = None
) -> SelectionInputs:
    """``x`` with the pools :func:`~gmts_core.methods.selection.select` reads set by the rule
    ``budget_over`` (module docstring); ``special``: bool (N,) the special tokens (``content``;
    None: none known, the rule is then ``trained``'s)."""
    check_budget_over(budget_over)
    n = x.num_tokens
    trained = x.trained if x.trained is not None else torch.ones(n, dtype=torch.bool)
    if budget_over == "content" and special is not None:
        return replace(x, candidates=trained & ~special.to(trained.device), counted=None)
    if budget_over == "all":
        return replace(x, candidates=trained, counted=torch.ones(n, dtype=torch.bool))
    return replace(x, candidates=None, counted=None)
