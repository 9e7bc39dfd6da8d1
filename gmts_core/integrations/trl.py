"""GMTS token selection inside TRL's ``GRPOTrainer`` (single process or accelerate/DeepSpeed).

:class:`GMTSGRPOTrainer` trains only on the top ``selection_ratio`` of completion tokens ranked
by a ``gmts_core`` selection method (``gmts``, ``entropy``, ``gmts_entropy``, ``surprisal``,
``random``, ``all`` or any method registered later), and otherwise is TRL's ``GRPOTrainer``.

How it hooks into TRL (1.16), with no copy of TRL's loss code:

- TRL already builds a token mask for its ``top_entropy_quantile`` option: ``_compute_loss``
  calls ``get_high_entropy_mask(entropies, mask, threshold)`` and multiplies the per-token loss
  (and the entropy bonus) by it. This class overrides that method to return the mask of the
  chosen ``gmts_core`` method, and makes TRL always ask for a mask.
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
  TRL's ``loss_type`` (``trl_terms.TRL_LOSS_AGGREGATION``). The per-token coefficient omega_t
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
  whole, once per generation batch (:mod:`~.trl_groups`); ``gmts/split_group_share`` logged.
- ``gmts_paper``/``gmts_paper_verl`` rank with their code's advantage, computed at generation
  from TRL's rewards over every answer of each group (``trl_terms.paper_advantages``), and
  with beta > 0 the paper's KL part beta (pi_ref / pi_theta - 1) (Framework1's, k3's
  derivative), also where TRL's loss is the bias-corrected KL, whose derivative
  beta r log(pi_ref / pi_theta) ``gmts`` ranks by (the coefficient of the loss TRL
  optimises). Completions with no loss token still count in their group's G, as Framework1
  counts zero-length answers.

Unlike TRL's ``top_entropy_quantile`` (a ``torch.quantile`` threshold, which keeps every token
tied at the threshold), selection keeps exactly k = ceil(ratio * N) tokens per scope, ties broken
by (answer, position) order, as everywhere in ``gmts_core`` (the paper's two methods keep by the
rules of its released code, :mod:`gmts_core.methods.gmts_released`).
"""

from __future__ import annotations

import functools
import logging
import types
from typing import Any

import torch
from accelerate.utils import is_peft_model
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from gmts_core.errors import InvalidInputError
from gmts_core.integrations import trl_groups
from gmts_core.integrations.selection_log import SelectionLogger
from gmts_core.integrations.trl_config import CONFIG_DEFAULTS, GMTSGRPOConfig, validate_selection
from gmts_core.integrations.trl_terms import (
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
from gmts_core.methods.selection import SelectionInputs, default_scope, select
from gmts_core.model.logit_head import head_path

logger = logging.getLogger(__name__)

_FUSED_OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs")
_EXACT_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")

__all__ = ["GMTSGRPOConfig", "GMTSGRPOTrainer"]


class GMTSGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` that trains on the tokens a ``gmts_core`` selection method picks.

    Its settings come from ``args``, a :class:`GMTSGRPOConfig` (``token_selection``,
    ``selection_ratio``, ``selection_scope``, ``log_selection``, documented there), so they can
    come from ``TrlParser`` or a YAML recipe. A plain ``GRPOConfig`` gets the defaults; the
    keyword arguments of the same names (the older interface) override either.

    Logged per step: ``gmts/selected_fraction``, ``gmts/gradient_coverage`` (of sum gamma, the
    applied selection's; ``_entropy``, ``_gmts``: theirs at the same ratio and scope) and
    ``gmts/overlap_entropy_gmts`` (Jaccard). Split groups: :mod:`~.trl_groups`."""

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

    # --- hooks into TRL ------------------------------------------------------------------------

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

    def _add_gmts_lm_head(self) -> None:
        """Ask TRL's fused LM head for log(sum pi^2) too, and capture its per-token outputs.

        TRL patched ``forward`` with outputs (log_probs, entropy); patching again wraps that
        forward (called unchanged without ``fused_lm_head``), so generation is unaffected. The
        capture wraps ``forward`` itself rather than using a module hook, because some wrappers
        (older PEFT releases) call ``model.forward`` directly, which skips hooks.
        """
        base = self._base_model()
        args: Any = self.args  # a GRPOConfig
        add_fused_lm_head(
            base,
            temperature=self.temperature,
            cast_lm_head_to_fp32=args.cast_lm_head_to_fp32,
            outputs=_FUSED_OUTPUTS,
        )
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

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """TRL's batch, each completion tagged with its group id before TRL shuffles it."""
        self._rewards_per_func = None
        output = super()._generate_and_score_completions(inputs)
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
        if trl_groups.gathers_whole_groups(self):  # groups split across micro-batches
            output[trl_groups.WHOLE_GROUP_MASK] = trl_groups.select_whole_groups(self, output)
        return output

    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """TRL's rewards of the whole generation batch (gathered), kept for the paper's
        advantage (:func:`~gmts_core.integrations.trl_terms.paper_advantages`)."""
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self._rewards_per_func = rewards_per_func.detach()
        return rewards_per_func

    def _compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        self._captured, self._capturing, self._batch, self._hidden = [], True, inputs, []
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._captured, self._capturing, self._batch, self._hidden = [], False, None, []

    def get_high_entropy_mask(
        self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float
    ) -> torch.Tensor:
        """The selection mask (B, T) of ``token_selection``; ``threshold`` is TRL's, unused."""
        if self._batch is None:
            raise RuntimeError("get_high_entropy_mask is only called from _compute_loss")
        valid = mask.bool()  # (B, T)
        if trl_groups.WHOLE_GROUP_MASK in self._batch:  # selected at generation, groups whole
            return self._batch[trl_groups.WHOLE_GROUP_MASK].to(valid.device) & valid
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
        """Exact g of the valid tokens with p >= CONFIDENT_PROB (``trl_terms.
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
            self._metrics["train"]["gmts/split_group_share"].append(share)
        x = budgeted_inputs(self, x, valid)  # selection_budget_over: what k counts
        sel = select(x, self.token_selection, self.selection_ratio, self.scope)
        local_mask = torch.zeros_like(valid)
        local_mask[valid] = sel.selected[offset : offset + int(valid.sum())].to(valid.device)
        self.last_selection = AppliedSelection(x, sel, local_mask, offset, int(valid.sum()))
        return self.last_selection

    def _selection_inputs(
        self, rows: torch.Tensor, lengths: torch.Tensor, answers: torch.Tensor, groups: torch.Tensor
    ) -> SelectionInputs:
        """SelectionInputs of the global batch under this trainer's loss (a fresh seed per call
        for the random control): ``trl_terms.trainer_selection_inputs``."""
        self._selection_calls += 1
        seed = self.args.seed * 1_000_003 + self._selection_calls
        return trainer_selection_inputs(self, rows, lengths, answers, groups, seed)

    def _log_selection(self, applied: AppliedSelection) -> None:
        """Selected fraction, gradient coverage, and entropy/GMTS coverage and overlap."""
        mode = "train" if getattr(self.model, "training", False) else "eval"
        found = selection_metrics(applied, self.token_selection, self.selection_ratio, self.scope)
        for name, value in found.items():
            self._metrics[mode][name].append(value)
