"""GMTS token selection inside TRL's ``GRPOTrainer`` (single process or accelerate/DeepSpeed).

:class:`GMTSGRPOTrainer` trains only on the top ``selection_ratio`` of completion tokens ranked
by a ``gmts_core`` selection method (``gmts``, ``entropy``, ``gmts_entropy``, ``surprisal``,
``random``, ``all`` or any method registered later), and otherwise is TRL's ``GRPOTrainer``.

How it hooks into TRL, with no copy of TRL's loss code (every private part of TRL it overrides
or calls is in :mod:`~gmts_core.integrations.trl_compat`, which checks the installed release):

- TRL already builds a token mask for its ``top_entropy_quantile`` option: ``_compute_loss``
  calls ``get_high_entropy_mask(entropies, mask, threshold)`` and multiplies the per-token loss
  (and the entropy bonus) by it. That method returns the mask of the chosen ``gmts_core``
  method here (:meth:`GMTSGRPOTrainer.selection_mask`), and TRL always asks for a mask.
- TRL scores completions with a fused, chunked LM head that never materializes the logits. The
  same kernel pass that gives TRL its entropy also returns ``log(sum_v pi_v^2)`` when asked, so
  the per-token gradient norm g = (1/tau) sqrt(1 - 2p + sum pi^2) (the formula of
  :mod:`gmts_core.stats.metrics`) needs no extra pass over the vocabulary for most tokens
  (:func:`grad_norm_from_logprob`). For confident tokens (p >= :data:`CONFIDENT_PROB`) the
  kernel's float32 sum_v pi_v^2 cancels against p^2, so their g is recomputed without
  cancellation, as (1 - p)^2 + sum_{v != y} pi_v^2 (:mod:`gmts_core.stats.metrics`), from the final
  hidden states of that same forward (captured by a hook): an extra LM-head pass over those
  rows only, no backward. g is then within float32 rounding of the float64 value.
- The advantages come from ``inputs["advantages"]``; the loss-aggregation weights w_i follow
  TRL's ``loss_type`` (``trl_selection.TRL_LOSS_AGGREGATION``). The per-token coefficient omega_t
  (:mod:`gmts_core.methods.coefficient`) takes the ratio to ``old_per_token_logps``
  (``num_iterations`` > 1), the clip (``epsilon``, ``epsilon_high``, ``delta``) and the k3 KL
  term to ``ref_per_token_logps`` (``beta`` > 0) into account, so gamma = w_i |omega_t| g is the
  exact norm of the gradient of TRL's own loss at each selected token's logits for the clipped loss
  types (grpo, bnpo, dr_grpo, dapo) with token-level importance sampling (with or without
  ``use_bias_correction_kl``). For the other loss types (cispo, sapo, vespo), sequence-level
  importance sampling or an off-policy mask it is exact only at the on-policy point without KL
  (a warning says so).
- Under several processes the per-token quantities are gathered (``pad_across_processes`` +
  ``gather``, as TRL does for its entropy quantile), every process runs the same
  :func:`gmts_core.methods.selection.select` on the whole batch, so the top-k is global, and each
  takes back its own slice.
- Groups: TRL shuffles each generation batch before splitting it into micro-batches, so the
  trainer tags every completion with its group id (global row // ``num_generations``) when the
  batch is generated; selection runs in ``GMTSGRPOConfig.selection_scope`` (unset: the method's
  default, ``group`` for the paper's methods). Groups split across micro-batches are selected
  whole, once per generation batch ("Whole groups" below); ``gmts/split_group_share`` logged.
- ``gmts_paper``/``gmts_paper_verl`` rank with their code's advantage, computed at generation
  from TRL's rewards over every answer of each group (``trl_selection.paper_advantages``), and
  with beta > 0 the paper's KL part beta (pi_ref / pi_theta - 1) (Framework1's, k3's
  derivative), also where TRL's loss is the bias-corrected KL, whose derivative
  beta r log(pi_ref / pi_theta) ``gmts`` ranks by (the coefficient of the loss TRL
  optimises). Completions with no loss token still count in their group's G, as Framework1
  counts zero-length answers.

Unlike TRL's ``top_entropy_quantile`` (a ``torch.quantile`` threshold, which keeps every token
tied at the threshold), selection keeps exactly k = ceil(ratio * N) tokens per scope, ties broken
by (answer, position) order, as everywhere in ``gmts_core`` (the paper's two methods keep by the
rules of its released code, :mod:`gmts_core.methods.gmts_released`).

The settings are fields of :class:`GMTSGRPOConfig` (TRL's ``GRPOConfig`` plus the GMTS fields);
the numbers computed from TRL's outputs are plain torch in
:mod:`~gmts_core.integrations.trl_selection`; the token log is
:mod:`~gmts_core.integrations.trl_log`.

Whole groups under TRL's gradient accumulation: a group-scoped selection (``gmts_paper``, or
``selection_scope="group"``) is made once per generation batch, over every answer of each group.
TRL's ``steps_per_generation`` defaults to ``gradient_accumulation_steps``: each generation
batch is shuffled and split into that many micro-batches, so a group of ``num_generations``
answers lands in several of them, and a selection made per micro-batch sees part of a group
(with 8 generations, a per-device batch of 4 and accumulation 2, 3 of 4 groups differed from
Framework1's selection). Here the statistics of the whole generation batch are computed once,
right after it is generated and scored (one extra forward pass, no gradient), the selection is
made over whole groups, and its mask travels with the batch through TRL's shuffle and split
(:data:`WHOLE_GROUP_MASK`); each micro-batch's loss then applies its rows of it. This is exact
where the policy does not change within a generation batch: one optimizer step per generation
batch (``steps_per_generation == gradient_accumulation_steps``) and ``num_iterations == 1``.
Otherwise (the policy moves between the micro-batches of one generation batch) the trainer
selects per micro-batch, warns at start and logs ``gmts/split_group_share``.

A recipe reads the GMTS fields like every other TRL setting (``TrlParser``, YAML)::

    # recipe.yaml                                 # python train.py --config recipe.yaml
    token_selection: gmts_paper
    selection_ratio: 0.2
    selection_scope: group                        # leave out: the method's own default
    log_selection: true
    bf16: false                                   # TRL defaults to bf16=True, on CPU too
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl import GRPOConfig

from gmts_core.errors import InvalidInputError
from gmts_core.integrations.trl_compat import GRPOTrainerHooks
from gmts_core.integrations.trl_log import SelectionLogger
from gmts_core.integrations.trl_selection import (
    GROUP_IDS,
    PAPER_ADVANTAGES,
    PAPER_STD,
    AppliedSelection,
    aggregation_for_loss_type,
    budgeted_inputs,
    confident_grad_norms,
    gather_rows,
    generation_group_ids,
    grad_norm_from_logprob,
    paper_advantages,
    per_token_advantages,
    selection_metrics,
    split_group_share,
    split_groups_warning,
    trainer_selection_inputs,
)
from gmts_core.knobs import DEFAULT_RATIO
from gmts_core.methods.budget import check_budget_over
from gmts_core.methods.selection import (
    METHODS,
    SCOPES,
    SelectionInputs,
    default_scope,
    select,
    top_k_count,
)
from gmts_core.model.logit_head import head_path

logger = logging.getLogger(__name__)

_FUSED_OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs")
_EXACT_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
WHOLE_GROUP_MASK = "gmts_whole_group_mask"  # (B, T) bool: the selection, made over whole groups

__all__ = ["GMTSGRPOConfig", "GMTSGRPOTrainer"]


# --- the settings ------------------------------------------------------------------------------
@dataclass
class GMTSGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus the settings of :class:`GMTSGRPOTrainer`. A dataclass
    subclass, so ``HfArgumentParser``, ``TrlParser`` and YAML recipes read the GMTS fields like
    every other TRL setting; each GMTS field is documented once, here (its ``help`` metadata is
    what the parsers print).

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


# --- the trainer -------------------------------------------------------------------------------


class GMTSGRPOTrainer(GRPOTrainerHooks):
    """TRL's ``GRPOTrainer`` that trains on the tokens a ``gmts_core`` selection method picks.

    Its settings come from ``args``, a :class:`GMTSGRPOConfig` (``token_selection``,
    ``selection_ratio``, ``selection_scope``, ``log_selection``, documented there), so they can
    come from ``TrlParser`` or a YAML recipe. A plain ``GRPOConfig`` gets the defaults; the
    keyword arguments of the same names (the older interface) override either.

    Logged per step: ``gmts/selected_fraction``, ``gmts/gradient_coverage`` (of sum gamma, the
    applied selection's; ``_entropy``, ``_gmts``: theirs at the same ratio and scope) and
    ``gmts/overlap_entropy_gmts`` (Jaccard), ``gmts/split_group_share``."""

    def __init__(
        self,
        *args: Any,
        token_selection: str | None = None,
        selection_ratio: float | None = None,
        log_selection: bool | None = None,
        selection_scope: str | None = None,
        **kwargs: Any,
    ) -> None:
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if config is not None and not isinstance(config, GMTSGRPOConfig):
            config = None  # a plain GRPOConfig: the GMTS defaults
        defaults = config if config is not None else CONFIG_DEFAULTS
        self.token_selection = token_selection or defaults.token_selection
        self.selection_ratio = float(
            defaults.selection_ratio if selection_ratio is None else selection_ratio
        )
        self.selection_scope = selection_scope or defaults.selection_scope
        log = defaults.log_selection if log_selection is None else log_selection
        validate_selection(self.token_selection, self.selection_ratio, self.selection_scope)
        self.last_selection: AppliedSelection | None = None
        self._captured: list[Any] = []
        self._capturing = False
        self._batch: dict[str, Any] | None = None
        self._selection_calls = 0
        super().__init__(*args, **kwargs)
        self.check_attributes()
        output_dir = str(self.args.output_dir or ".")
        self.selection_log = SelectionLogger(output_dir) if log else None
        self.aggregation = aggregation_for_loss_type(self.loss_type)
        self._vocab = int(self._base_model().get_output_embeddings().weight.shape[0])
        self._hidden: list[torch.Tensor] = []
        self._add_gmts_lm_head()
        self._exact_coefficient = self._coefficient_is_exact()
        self._rewards_per_func: torch.Tensor | None = None
        warning = split_groups_warning(self.args, self.scope, self.token_selection)
        if warning:
            logger.warning(warning)

    @property
    def scope(self) -> str:
        """The scope selection runs in: ``selection_scope``, else the method's default."""
        return self.selection_scope or default_scope([self.token_selection])

    def _coefficient_is_exact(self) -> bool:
        """Whether omega_t (ratio, clip, KL) is the loss's own coefficient for these settings."""
        args: Any = self.args
        exact = (
            self.loss_type in _EXACT_LOSS_TYPES
            and getattr(self, "importance_sampling_level", "token") == "token"
            and getattr(args, "off_policy_mask_threshold", None) is None
        )
        if not exact:
            logger.warning(
                "GMTSGRPOTrainer: with loss_type=%s, importance_sampling_level=%s or an "
                "off-policy mask, gamma = |A| w g is exact only on-policy without KL",
                self.loss_type,
                getattr(self, "importance_sampling_level", "token"),
            )
        return exact

    # --- the hooks TRL calls (trl_compat.GRPOTrainerHooks) -------------------------------------

    def _add_gmts_lm_head(self) -> None:
        """Ask TRL's fused LM head for log(sum pi^2) too, and capture its per-token outputs.

        TRL patched ``forward`` with outputs (log_probs, entropy); patching again wraps that
        forward (called unchanged without ``fused_lm_head``), so generation is unaffected. The
        capture wraps ``forward`` itself rather than using a module hook, because some wrappers
        (older PEFT releases) call ``model.forward`` directly, which skips hooks.
        """
        base = self._base_model()
        self.add_fused_lm_head(base, _FUSED_OUTPUTS)
        fused_forward = base.forward

        @functools.wraps(type(base).forward)  # generate() validates kwargs against it
        def forward_and_capture(module: torch.nn.Module, *f_args: Any, **f_kwargs: Any) -> Any:
            output = fused_forward(*f_args, **f_kwargs)
            if self._capturing and getattr(output, "log_sum_sq_probs", None) is not None:
                self._captured.append(output)
            return output

        base.forward = types.MethodType(forward_and_capture, base)

        def keep_hidden(module: Any, f_args: Any, f_kwargs: Any, output: Any) -> None:
            if self._capturing:  # the final hidden states, for confident tokens' exact g
                self._hidden.append(output[0].detach())

        body = getattr(base, base.base_model_prefix)
        body.register_forward_hook(keep_hidden, with_kwargs=True)

    def _base_model(self) -> Any:
        """The policy under any PEFT wrapper: the module TRL gave its fused LM head."""
        model: Any = self.model
        return model.get_base_model() if is_peft_model(model) else model

    def on_generation_start(self) -> None:
        self._rewards_per_func = None

    def on_generation_batch(self, output: dict[str, Any]) -> dict[str, Any]:
        """TRL's batch, each completion tagged with its group id before TRL shuffles it."""
        training = bool(getattr(self.model, "training", False))
        size = (self.num_generations if training else self.num_generations_eval) or 1
        rows = int(output["completion_ids"].shape[0])
        device = output["completion_ids"].device
        output[GROUP_IDS] = generation_group_ids(rows, self.accelerator.process_index, size, device)
        std = PAPER_STD.get(self.token_selection)
        if std is not None and self._rewards_per_func is not None:
            # the paper's methods rank with their code's advantage, from the rewards of the
            # whole group (all processes), not TRL's (sample std + 1e-4)
            every = paper_advantages(self._rewards_per_func, self.reward_weights, size, *std)
            start = self.accelerator.process_index * rows
            output[PAPER_ADVANTAGES] = every[start : start + rows].to(device)
        if self.gathers_whole_groups():  # groups split across micro-batches
            output[WHOLE_GROUP_MASK] = self.select_whole_groups(output)
        return output

    def on_rewards(self, rewards_per_func: torch.Tensor) -> None:
        """TRL's rewards of the whole generation batch (gathered), kept for the paper's
        advantage (:func:`~gmts_core.integrations.trl_selection.paper_advantages`)."""
        self._rewards_per_func = rewards_per_func

    @contextmanager
    def loss_scope(self, inputs: dict[str, Any]) -> Iterator[None]:
        """Capture the fused LM head's outputs and final hidden states of the forward passes
        on ``inputs`` (a micro-batch, or a whole generation batch)."""
        self._captured, self._capturing, self._batch, self._hidden = [], True, inputs, []
        try:
            yield
        finally:
            self._captured, self._capturing, self._batch, self._hidden = [], False, None, []

    def selection_mask(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The selection mask (B, T) of ``token_selection`` (TRL's loss multiplies by it)."""
        if self._batch is None:
            raise RuntimeError("selection_mask is only called inside loss_scope")
        valid = mask.bool()  # (B, T)
        if WHOLE_GROUP_MASK in self._batch:  # selected at generation, groups whole
            return self._batch[WHOLE_GROUP_MASK].to(valid.device) & valid
        logprob, log_sum_sq = self._captured_stats(entropies.shape)
        old = self._batch.get("old_per_token_logps")
        ref = self._batch.get("ref_per_token_logps") if self.beta != 0.0 else None
        applied = self.select_tokens(
            entropy=entropies.detach()[valid],
            logprob=logprob[valid],
            log_sum_sq_prob=log_sum_sq[valid],
            advantage=per_token_advantages(self._batch["advantages"], valid),
            valid=valid,
            old_logprob=None if old is None else old.detach()[valid],
            ref_logprob=None if ref is None else ref.detach()[valid],
            confident_grad_norm=self._confident_grad_norms(logprob, valid),
            group_ids=self._batch.get(GROUP_IDS),
            paper_advantage=(
                per_token_advantages(self._batch[PAPER_ADVANTAGES], valid)
                if PAPER_ADVANTAGES in self._batch
                else None
            ),
        )
        self._log_selection(applied)
        if self.selection_log is not None and getattr(self.model, "training", False):
            self.selection_log.record(self, applied, self._batch)
        return applied.local_mask

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log, then this logging step's token log (``log_selection``)."""
        super().log(logs, start_time)
        if self.selection_log is not None and self.accelerator.is_main_process:
            self.selection_log.flush(self.state.global_step)

    def _captured_stats(self, shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
        """log p and log(sum pi^2) of the completion tokens, (B, T), from the captured passes."""
        if not self._captured:
            raise RuntimeError("GMTSGRPOTrainer: the fused LM head returned no log(sum pi^2)")
        width = shape[1]
        logprob = torch.cat([o.log_probs[:, -width:] for o in self._captured]).detach()
        log_sum_sq = torch.cat([o.log_sum_sq_probs[:, -width:] for o in self._captured])
        return logprob, log_sum_sq

    def _confident_grad_norms(
        self, logprob: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Exact g of the valid tokens with p >= CONFIDENT_PROB (``trl_selection.
        confident_grad_norms``); None when the hidden states were not captured."""
        if len(self._hidden) != len(self._captured) or not self._hidden:
            return None
        ids = self._batch["completion_ids"] if self._batch is not None else None
        path = head_path(self._base_model())
        return confident_grad_norms(self._hidden, ids, logprob, valid, path, self.temperature)

    # --- selection -----------------------------------------------------------------------------

    def select_tokens(
        self,
        entropy: torch.Tensor,
        logprob: torch.Tensor,
        log_sum_sq_prob: torch.Tensor,
        advantage: torch.Tensor,
        valid: torch.Tensor,
        old_logprob: torch.Tensor | None = None,
        ref_logprob: torch.Tensor | None = None,
        confident_grad_norm: tuple[torch.Tensor, torch.Tensor] | None = None,
        group_ids: torch.Tensor | None = None,
        paper_advantage: torch.Tensor | None = None,
    ) -> AppliedSelection:
        """Gather this process's valid tokens (flat, (n,)), select globally, return the slice.

        ``old_logprob`` (pi_old, None: on-policy) and ``ref_logprob`` (the reference, when
        beta > 0) give the coefficient omega_t; ``confident_grad_norm`` (which tokens, their g)
        replaces the kernel-derived g of confident tokens with the exact one; ``group_ids``
        (B,) the group of each completion (None: one group); ``paper_advantage`` (n,) the
        paper's code's advantage of each valid token's completion (``gmts_paper``,
        ``gmts_paper_verl``: ranked with it instead of TRL's).
        """
        grad_norm = grad_norm_from_logprob(logprob, log_sum_sq_prob, self.temperature, self._vocab)
        if confident_grad_norm is not None:
            which, exact = confident_grad_norm
            grad_norm[which.to(grad_norm.device)] = exact.to(grad_norm)
        if not self._exact_coefficient:
            old_logprob, ref_logprob = None, None
        old = logprob if old_logprob is None else old_logprob  # ratio 1 on-policy
        ref = logprob if ref_logprob is None else ref_logprob  # KL term 0 without a reference
        answer_id = valid.nonzero()[:, 0]  # (n,) local answer index of each valid token
        lengths = valid.sum(dim=1)  # (B,)
        columns = [entropy, logprob, grad_norm, advantage, old, ref]
        local_rows = torch.stack([c.double() for c in columns], dim=1)  # (n, 6)
        rows, offset = gather_rows(self.accelerator, local_rows)
        all_lengths, answer_offset = gather_rows(self.accelerator, lengths.unsqueeze(1))
        answer_ids, _ = gather_rows(self.accelerator, (answer_id + answer_offset).unsqueeze(1))
        if group_ids is None:
            group_ids = torch.zeros(valid.shape[0], dtype=torch.long, device=valid.device)
        groups, _ = gather_rows(
            self.accelerator, group_ids.to(valid.device)[answer_id].unsqueeze(1)
        )
        rank = torch.full_like(answer_id, self.accelerator.process_index)
        ranks, _ = gather_rows(self.accelerator, rank.unsqueeze(1))
        x = self._selection_inputs(
            rows.cpu(), all_lengths[:, 0].cpu(), answer_ids[:, 0], groups[:, 0].cpu()
        )
        x.micro_batch = ranks[:, 0].cpu()  # Clip-Cov / KL-Cov means per process, as verl
        # every completion's group, those without a loss token too (G counts them, as
        # Framework1 counts zero-length answers); rows are answer ids (answer_offset is a row one)
        every_group, _ = gather_rows(self.accelerator, group_ids.to(valid.device).unsqueeze(1))
        x.answer_group = every_group[:, 0].cpu().long()
        if paper_advantage is not None:
            paper, _ = gather_rows(self.accelerator, paper_advantage.double().unsqueeze(1))
            x.advantage = paper[:, 0].cpu()
        if getattr(self.model, "training", False):
            share = split_group_share(x.answer_group, int(self.num_generations or 1))
            self.log_metric("gmts/split_group_share", share)
        rule = getattr(self.args, "selection_budget_over", CONFIG_DEFAULTS.selection_budget_over)
        x = budgeted_inputs(self, x, valid, rule)  # selection_budget_over: what k counts
        sel = select(x, self.token_selection, self.selection_ratio, self.scope)
        local_mask = torch.zeros_like(valid)
        local_mask[valid] = sel.selected[offset : offset + int(valid.sum())].to(valid.device)
        self.last_selection = AppliedSelection(x, sel, local_mask, offset, int(valid.sum()))
        return self.last_selection

    def _selection_inputs(
        self, rows: torch.Tensor, lengths: torch.Tensor, answers: torch.Tensor, groups: torch.Tensor
    ) -> SelectionInputs:
        """SelectionInputs of the global batch under this trainer's loss (a fresh seed per call
        for the random control): ``trl_selection.trainer_selection_inputs``."""
        self._selection_calls += 1
        seed = self.args.seed * 1_000_003 + self._selection_calls
        return trainer_selection_inputs(self, rows, lengths, answers, groups, seed)

    def _log_selection(self, applied: AppliedSelection) -> None:
        """Selected fraction, gradient coverage, and entropy/GMTS coverage and overlap."""
        found = selection_metrics(applied, self.token_selection, self.selection_ratio, self.scope)
        for name, value in found.items():
            self.log_metric(name, value)

    # --- whole groups (module docstring) -------------------------------------------------------

    def gathers_whole_groups(self) -> bool:
        """Whether this generation batch is selected at once, over whole groups: training, a
        group scope, groups split across micro-batches, the policy fixed meanwhile."""
        args = self.args
        steps = int(getattr(args, "steps_per_generation", 1) or 1)
        return (
            bool(getattr(self.model, "training", False))
            and self.scope == "group"
            and steps > 1
            and steps == int(args.gradient_accumulation_steps)
            and int(getattr(self, "num_iterations", 1)) == 1
        )

    def select_whole_groups(self, output: dict[str, Any]) -> torch.Tensor:
        """The selection mask (B, T) of this process's rows of the generation batch ``output``,
        made over every process's whole batch: its statistics from one forward pass (TRL's own
        per-token pass, chunked by the per-device batch size), then this trainer's selection."""
        prompt_ids, completion_ids = output["prompt_ids"], output["completion_ids"]
        completion_mask = output["completion_mask"]
        mask = completion_mask * output["tool_mask"] if "tool_mask" in output else completion_mask
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], completion_mask], dim=1)
        with self.loss_scope(output):
            entropies = self.per_token_entropies(
                input_ids,
                attention_mask,
                completion_ids.size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
            return self.selection_mask(entropies, mask).detach()
