"""Every part of TRL's ``GRPOTrainer`` that GMTS relies on and TRL does not promise to keep,
in one place, checked when this module is imported.

:class:`GRPOTrainerHooks` is TRL's ``GRPOTrainer`` with its private steps routed to named hooks,
which :class:`gmts_core.integrations.trl.GMTSGRPOTrainer` implements:

- ``_compute_loss`` runs inside :meth:`GRPOTrainerHooks.loss_scope` (the trainer captures the
  fused LM head's outputs of that loss's forward);
- ``get_high_entropy_mask``, which ``_compute_loss`` calls for its ``top_entropy_quantile``
  option and multiplies the per-token loss by, returns :meth:`GRPOTrainerHooks.selection_mask`;
  ``top_entropy_quantile`` always reads 0, so TRL always asks for that mask;
- ``_generate_and_score_completions`` ends with :meth:`GRPOTrainerHooks.on_generation_batch`
  (the batch tagged with group ids before TRL shuffles it) and ``_calculate_rewards`` hands the
  gathered rewards to :meth:`GRPOTrainerHooks.on_rewards`;
- :meth:`GRPOTrainerHooks.add_fused_lm_head` (``trl.trainer.utils.add_fused_lm_head``, which
  TRL's fused LM head is patched in by), :meth:`GRPOTrainerHooks.per_token_entropies`
  (``_get_per_token_logps_and_entropies``) and :meth:`GRPOTrainerHooks.log_metric`
  (``_metrics``).

On import the installed TRL must be in :data:`TRL_RELEASES` (the ``[trl]`` extra's floor up to
the newest release the suite ran on) and have every private method above
(:data:`PRIVATE_METHODS`); on construction the trainer must carry every attribute GMTS reads
(:data:`TRAINER_ATTRIBUTES`). Otherwise
:class:`~gmts_core.integrations.releases.UnsupportedReleaseError` names the installed release
and the range.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import trl
from trl import GRPOTrainer
from trl.trainer import utils as trl_utils

from gmts_core.errors import InvalidInputError
from gmts_core.integrations.releases import ReleaseRange

# pyproject's [trl] extra declares the same range; the suite runs 1.16.0. TRL 1.15.0 has every
# name below, but its fused LM head needs Triton (GPU only): on a CPU its _ChunkedLogProbFunction
# is None and the first training step fails (test_trl.py::test_two_training_steps_on_cpu), so
# 1.15 is outside the range until a GPU run shows it works there.
TRL_RELEASES = ReleaseRange("trl", floor="1.16", below="1.17", tested=("1.16.0",))

# GRPOTrainer's private methods GMTSGRPOTrainer overrides or calls
PRIVATE_METHODS = (
    "_compute_loss",
    "_generate_and_score_completions",
    "_calculate_rewards",
    "get_high_entropy_mask",
    "_get_per_token_logps_and_entropies",
)
UTILS_FUNCTIONS = ("add_fused_lm_head",)  # trl.trainer.utils
# set by GRPOTrainer.__init__ and read by GMTSGRPOTrainer
TRAINER_ATTRIBUTES = (
    "_metrics",
    "accelerator",
    "beta",
    "epsilon_low",
    "epsilon_high",
    "loss_type",
    "max_completion_length",
    "num_generations",
    "num_generations_eval",
    "processing_class",
    "reward_weights",
    "temperature",
)


def check_trl(version: str, trainer_cls: Any = GRPOTrainer, utils: Any = trl_utils) -> None:
    """Refuse a TRL release outside :data:`TRL_RELEASES`, or one lacking a private name GMTS
    overrides or calls (:class:`~gmts_core.integrations.releases.UnsupportedReleaseError`)."""
    TRL_RELEASES.check(version)
    TRL_RELEASES.require(version, "trl.GRPOTrainer", trainer_cls, PRIVATE_METHODS)
    TRL_RELEASES.require(version, "trl.trainer.utils", utils, UTILS_FUNCTIONS)


check_trl(trl.__version__)


class GRPOTrainerHooks(GRPOTrainer):
    """TRL's ``GRPOTrainer`` whose private steps call the named hooks below (module docstring);
    a subclass implements :meth:`selection_mask` and may override the others."""

    def check_attributes(self) -> None:
        """After ``GRPOTrainer.__init__``: every attribute GMTS reads is there."""
        TRL_RELEASES.require(trl.__version__, "a GRPOTrainer", self, TRAINER_ATTRIBUTES)

    # --- the hooks ---------------------------------------------------------------------------

    def on_generation_start(self) -> None:
        """Called before TRL generates and scores a batch."""

    def on_rewards(self, rewards_per_func: torch.Tensor) -> None:
        """TRL's rewards of the whole generation batch (gathered), (N, functions)."""

    def on_generation_batch(self, output: dict[str, Any]) -> dict[str, Any]:
        """TRL's generated and scored batch, before TRL shuffles and splits it."""
        return output

    @contextmanager
    def loss_scope(self, inputs: dict[str, Any]) -> Iterator[None]:
        """Around TRL's loss on one micro-batch ``inputs``."""
        yield

    def selection_mask(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The (B, T) mask TRL's loss multiplies the per-token loss by."""
        raise NotImplementedError

    # --- TRL's private methods, routed to the hooks --------------------------------------------

    @property
    def top_entropy_quantile(self) -> float:
        """Always < 1, so TRL's ``_compute_loss`` asks ``get_high_entropy_mask`` for a mask."""
        return 0.0

    @top_entropy_quantile.setter
    def top_entropy_quantile(self, value: float) -> None:
        if value < 1.0:
            raise InvalidInputError(
                "GMTSGRPOTrainer selects tokens itself: leave top_entropy_quantile at 1.0 and use "
                "token_selection='entropy' with selection_ratio for the 80/20 rule"
            )

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        self.on_generation_start()
        return self.on_generation_batch(super()._generate_and_score_completions(inputs))

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self.on_rewards(rewards_per_func.detach())
        return rewards_per_func

    def _compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        with self.loss_scope(inputs):
            return super()._compute_loss(model, inputs)

    def get_high_entropy_mask(
        self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float
    ) -> torch.Tensor:
        """:meth:`selection_mask`; ``threshold`` is TRL's quantile, unused."""
        return self.selection_mask(entropies, mask)

    # --- TRL's internals, called ---------------------------------------------------------------

    def add_fused_lm_head(self, model: Any, outputs: tuple[str, ...]) -> None:
        """Patch ``model.forward`` with TRL's fused, chunked LM head returning ``outputs``, at
        this trainer's temperature and ``cast_lm_head_to_fp32``."""
        args: Any = self.args  # a GRPOConfig
        trl_utils.add_fused_lm_head(
            model,
            temperature=self.temperature,
            cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,
            outputs=outputs,
        )

    def per_token_entropies(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int,
    ) -> torch.Tensor:
        """TRL's own per-token pass (no gradient): the entropies (B, logits_to_keep)."""
        with torch.no_grad():
            _, entropies, _ = self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=True,
            )
        return entropies

    def log_metric(self, name: str, value: float) -> None:
        """Append ``value`` to TRL's logged metric ``name`` (train or eval, as the model is)."""
        mode = "train" if getattr(self.model, "training", False) else "eval"
        self._metrics[mode][name].append(value)
