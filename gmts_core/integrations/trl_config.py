"""``GMTSGRPOConfig``: TRL's ``GRPOConfig`` with the GMTS token-selection settings.

A dataclass subclass, so ``HfArgumentParser``, ``TrlParser`` and YAML recipes read the GMTS
fields like every other TRL setting::

    # recipe.yaml                                 # python train.py --config recipe.yaml
    token_selection: gmts_paper
    selection_ratio: 0.2
    selection_scope: group                        # leave out: the method's own default
    log_selection: true
    bf16: false                                   # TRL defaults to bf16=True, on CPU too

Each GMTS field is documented once, here (its ``help`` metadata is what the parsers print).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from gmts_core.errors import InvalidInputError
from gmts_core.knobs import DEFAULT_RATIO
from gmts_core.methods.budget import check_budget_over
from gmts_core.methods.selection import METHODS, SCOPES, default_scope, top_k_count


@dataclass
class GMTSGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the settings of :class:`gmts_core.integrations.trl.GMTSGRPOTrainer`.

    Note: TRL's ``bf16`` defaults to True even with ``use_cpu=True``; set ``bf16: false`` for
    float32 numbers.
    """

    token_selection: str = field(
        default="gmts",
        metadata={
            "help": "Selection method whose tokens the loss trains on: a name from "
            "gmts_core.methods.selection.list_methods() (gmts, entropy, gmts_entropy, "
            "gmts_paper, gmts_paper_verl, surprisal, random, all, clip_cov, kl_cov, lopti, "
            "gtpo, rsi, high_prob)."
        },
    )
    selection_ratio: float = field(
        default=DEFAULT_RATIO,
        metadata={
            "help": "Share of completion tokens kept, in (0, 1]: k = ceil(ratio * N) per "
            "selection scope (gmts_paper keeps N - max(1, ceil(N p)) per group and "
            "gmts_paper_verl the scores above the int(n p)-th smallest, p = the decimal "
            "complement of ratio, the share the paper's code removes)."
        },
    )
    selection_scope: str | None = field(
        default=None,
        metadata={
            "help": "Which tokens compete for the kept places: batch (every completion token "
            "of the micro-batch on every process), group (the answers of one prompt, from "
            "num_generations) or answer. Unset: the method's default (group for gmts_paper "
            "and gmts_paper_verl, as in the paper; batch for the others)."
        },
    )
    selection_budget_over: str = field(
        default="trained",
        metadata={
            "help": "What the budget k = ceil(ratio * N) counts (gmts_core.methods.budget): "
            "trained (every completion token TRL's loss counts; the paper's rule), content "
            "(those less the tokenizer's special tokens: chat-template markers, EOS, tool-call "
            "tags registered as special tokens, which are then never selected) or all (in TRL "
            "the same as trained: its completion mask is the loss's)."
        },
    )
    log_selection: bool = field(
        default=False,
        metadata={
            "help": "Write one row per completion token (entropy, g, gamma, advantage, the "
            "applied mask) at every logging step to OUTPUT_DIR/gmts_selection/ "
            "(gmts analyze-run reads it)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_selection(self.token_selection, self.selection_ratio, self.selection_scope)
        check_budget_over(self.selection_budget_over)

    def resolved_scope(self) -> str:
        """The scope selection runs in: the explicit one, else the method's default."""
        return self.selection_scope or default_scope([self.token_selection])


def validate_selection(method: str, ratio: float, scope: str | None) -> None:
    """Unknown method names list the valid ones; ratio in (0, 1]; scope one of SCOPES."""
    METHODS.get(method)
    top_k_count(ratio, 1)  # ValueError outside (0, 1]
    if scope is not None and scope not in SCOPES:
        raise InvalidInputError(f"unknown selection scope {scope!r}; valid: {', '.join(SCOPES)}")


class _Defaults:
    """The GMTS fields' defaults, read from :class:`GMTSGRPOConfig` (one place)."""

    def __getattr__(self, name: str) -> Any:
        return GMTSGRPOConfig.__dataclass_fields__[name].default


CONFIG_DEFAULTS: Any = _Defaults()  # for a trainer given a plain GRPOConfig
