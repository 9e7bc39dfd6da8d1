"""The numbers :class:`~gmts_core.integrations.trl.GMTSGRPOTrainer` takes from TRL's outputs, in
plain torch (no TRL import, so they are tested without a trainer, and verl's selection shares
g): which loss aggregation each TRL ``loss_type`` is, g from the fused kernel's
log-probabilities, per-token advantages, completions' group ids, what a micro-batch selected,
the rows of every process gathered, and the metrics a selection logs."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.analysis.summaries import gradient_coverage, overlap
from gmts_core.errors import InvalidInputError
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.budget import special_ids, special_mask, with_budget
from gmts_core.methods.coefficient import ClipSettings, effective_coefficient, selection_inputs
from gmts_core.methods.selection import Selection, SelectionInputs, select
from gmts_core.stats.metrics import token_stats_chunked

logger = logging.getLogger(__name__)

# TRL loss_type -> gmts_core loss-aggregation mode (the weights w_i of TRL's loss).
# "grpo"/"sapo": mean over answers of each answer's token mean -> 1 / (G |o_i|).
# "dr_grpo": sum over tokens / (G * max_completion_length) -> 1 / (G L_max).
# "dapo"/"bnpo"/"cispo"/"vespo": sum over tokens / token count -> 1 / sum_j |o_j|. bnpo divides
#   by each process's own count, dapo by the global one; the ranking uses the global count.
# At the on-policy point (ratio 1) the per-token gradients of cispo, vespo and sapo reduce to
# w_i A_i d log pi / dz as well. "luspo" (a sequence sum scaled by length) has no mode here.
TRL_LOSS_AGGREGATION: dict[str, str] = {
    "grpo": "seq_mean_token_mean",
    "sapo": "seq_mean_token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "dapo": "token_mean",
    "bnpo": "token_mean",
    "cispo": "token_mean",
    "vespo": "token_mean",
}

# Tokens at least this probable get g from their logits (no cancellation): below it the float32
# cancellation in sum pi^2 - p^2 costs less than 1e-3 of g (error ~ 1e-7 vs (1 - p)^2 >= 2.5e-3).
CONFIDENT_PROB = 0.95


def aggregation_for_loss_type(loss_type: str) -> str:
    """The ``gmts_core.methods.aggregation`` mode whose weights w_i match TRL's ``loss_type``."""
    try:
        return TRL_LOSS_AGGREGATION[loss_type]
    except KeyError:
        raise InvalidInputError(
            f"GMTSGRPOTrainer does not support loss_type {loss_type!r}; "
            f"supported: {', '.join(sorted(TRL_LOSS_AGGREGATION))}"
        ) from None


@dataclass
class AppliedSelection:
    """What the trainer selected on its last micro-batch (for logging, tests and debugging)."""

    inputs: SelectionInputs  # the gathered, global batch, flat (N,) in (process, answer, pos)
    selection: Selection  # gmts_core's result on ``inputs``
    local_mask: torch.Tensor  # (B, T) bool, this process's slice, the mask applied to the loss
    offset: int  # where this process's tokens start in ``inputs``
    num_local: int  # how many of them are this process's


def grad_norm_from_logprob(
    logprob: torch.Tensor, log_sum_sq_prob: torch.Tensor, temperature: float, vocab_size: int
) -> torch.Tensor:
    """g = (1/tau) sqrt(1 - 2p + sum pi^2) from log p and log(sum_v pi_v^2), in float64.

    Written as (1 - p)^2 + (sum pi^2 - p^2), the second term being sum_{v != y} pi_v^2. That
    difference cancels in the kernel's float32 sums for confident tokens (relative error ~1e-7
    / (1 - p)^2), so it is clamped to its exact range [(1 - p)^2 / (V - 1), (1 - p)^2] (g within
    a factor sqrt(2)); the trainer recomputes those tokens (p >= CONFIDENT_PROB) from their
    logits with :func:`gmts_core.stats.metrics.token_stats`. Shapes: (n,) each.
    """
    lp = logprob.double()
    p = lp.exp()
    miss_sq = torch.expm1(lp).square()  # (1 - p)^2, accurate for p near 1
    rest = log_sum_sq_prob.double().exp() - p.square()
    rest = torch.minimum(torch.maximum(rest, miss_sq / max(vocab_size - 1, 1)), miss_sq)
    return (miss_sq + rest).sqrt() / temperature


GROUP_IDS = "gmts_group_ids"  # the key of each completion's group id in TRL's batch dict


def generation_group_ids(
    rows: int, process_index: int, num_generations: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Group id of each of this process's ``rows`` completions, (rows,) int64.

    TRL's generation batch is G = ``num_generations`` consecutive completions per prompt over
    all processes, process p holding rows [p * rows, (p + 1) * rows): the id is the global row
    // G, so a group split between processes has one id on both.
    """
    start = process_index * rows
    return torch.arange(start, start + rows, device=device) // max(num_generations, 1)


PAPER_ADVANTAGES = "gmts_paper_advantages"  # batch key: the paper's code's advantage per row
PAPER_STD = {"gmts_paper": (False, 1e-6), "gmts_paper_verl": (True, 1e-6)}  # (unbiased, eps)


def paper_advantages(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    num_generations: int,
    unbiased: bool,
    eps: float,
) -> torch.Tensor:
    """The advantage the paper's released code computes from each completion's reward, over
    the whole generation batch (all processes, every answer of each group), (N,) float64:
    A = (r - mean r) / (std r + eps) per group of ``num_generations`` consecutive rows, the
    population std for Framework1 (``np.std``), the unbiased one for its verl code; r the
    weighted ``nansum`` of the reward functions, as TRL's (a row where every function
    abstained: NaN, left out of the mean and std, advantage 0).

    TRL's own advantage divides by the sample std + 1e-4, so at beta > 0 (where the KL part
    does not scale with it) the paper's methods would rank differently with it.
    """
    r = rewards_per_func.double()
    total = (r * weights.double().to(r.device).unsqueeze(0)).nansum(dim=1)
    total[torch.isnan(r).all(dim=1)] = math.nan
    grouped = total.view(-1, max(num_generations, 1))  # (groups, G)
    scored = ~torch.isnan(grouped)
    count = scored.sum(dim=1, keepdim=True).clamp(min=1)
    mean = torch.where(scored, grouped, 0.0).sum(dim=1, keepdim=True) / count
    centred = torch.where(scored, grouped - mean, 0.0)
    dof = (count - 1).clamp(min=1) if unbiased else count
    std = (centred.pow(2).sum(dim=1, keepdim=True) / dof).sqrt()
    return (centred / (std + eps)).reshape(-1)


def split_group_share(group_of_answer: torch.Tensor, num_generations: int) -> float:
    """Share of the groups present in a micro-batch that are not whole (fewer than
    ``num_generations`` of their answers here): TRL shuffles each generation batch and splits
    it into ``steps_per_generation`` micro-batches, so a group-scoped selection then sees only
    part of a group."""
    if group_of_answer.numel() == 0:
        return 0.0
    _, counts = torch.unique(group_of_answer, return_counts=True)
    return float((counts < num_generations).double().mean())


def split_groups_warning(args: Any, scope: str, method: str) -> str | None:
    """Why a group-scoped selection sees part of each group (TRL shuffles each generation batch
    and splits it into ``steps_per_generation`` micro-batches, by default the accumulation
    steps), and the settings that keep groups whole; None where they are whole, or gathered
    whole before selecting (:meth:`~gmts_core.integrations.trl.GMTSGRPOTrainer.
    gathers_whole_groups`: the policy fixed within a generation batch)."""
    steps = int(getattr(args, "steps_per_generation", 1) or 1)
    if steps <= 1 or scope != "group":
        return None
    iterations = int(getattr(args, "num_iterations", 1) or 1)
    if steps == int(args.gradient_accumulation_steps) and iterations == 1:
        return None  # selected once per generation batch, over whole groups
    return (
        f"GMTSGRPOTrainer: steps_per_generation={steps} (gradient_accumulation_steps="
        f"{args.gradient_accumulation_steps}, num_iterations={iterations}) splits each group "
        f"across micro-batches between which the policy moves, and {method} selects within "
        "the part of a group each one holds (logged as gmts/split_group_share). Groups are "
        "selected whole with steps_per_generation equal to gradient_accumulation_steps and "
        "num_iterations=1, or with steps_per_generation=1"
    )


def confident_grad_norms(
    hidden_states: list[torch.Tensor],
    ids: torch.Tensor | None,
    logprob: torch.Tensor,
    valid: torch.Tensor,
    path: Any,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Exact g of the valid tokens with p >= CONFIDENT_PROB from their logits, recomputed from
    the captured final hidden states through the LM head ``path``: (which of the valid tokens
    (n,) bool, their g (m,)); None where the shapes do not line up or the head cannot run
    outside its forward (e.g. a sharded FSDP2 head)."""
    width = logprob.shape[1]
    hidden = torch.cat([h[:, :-1][:, -width:] for h in hidden_states])  # (B, T, D)
    if ids is None or hidden.shape[:2] != valid.shape:
        return None
    confident = valid & (logprob >= math.log(CONFIDENT_PROB))  # (B, T)
    which = confident[valid]  # (n,)
    if not bool(which.any()):
        return which, torch.empty(0, dtype=torch.float64)
    h = hidden[confident]  # (m, D)
    try:
        with torch.no_grad():
            stats = token_stats_chunked(
                h.shape[0],
                lambda sl: path.logits(h[sl].to(path.head.weight.dtype)),
                ids[confident],
                temperature,
            )
    except RuntimeError as exc:  # e.g. a sharded head (FSDP2 DTensor) outside its forward
        logger.warning("exact g of confident tokens unavailable (%s); using the bound", exc)
        return None
    return which, stats.grad_norm.double()


def per_token_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Advantages (B,) or (B, T) -> one value per valid token, flat (n,)."""
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    return adv.expand_as(mask)[mask]


def gather_rows(accelerator: Any, local: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Rows (n_p, F) of every process, concatenated in process order, and this one's offset.

    Processes hold different numbers of rows, so each is padded to the longest before the
    gather (as TRL's entropy quantile does) and the padding is cut off by the known counts.
    """
    count = torch.tensor([local.shape[0]], device=local.device)
    counts = accelerator.gather(count).cpu()  # (P,)
    padded = accelerator.pad_across_processes(local, dim=0)  # (n_max, F)
    gathered = accelerator.gather(padded).view(len(counts), padded.shape[0], -1)  # (P, n_max, F)
    rows = torch.cat([gathered[p, : int(c)] for p, c in enumerate(counts)])  # (N, F)
    offset = int(counts[: accelerator.process_index].sum())
    return rows, offset


def selection_metrics(
    applied: AppliedSelection, method: str, ratio: float, scope: str
) -> dict[str, float]:
    """What the trainer logs of one selection: the selected fraction and, where GMTS ranks
    anything (not a zero-signal batch), the gradient coverage of the method, of entropy and of
    GMTS at the same ratio, and entropy's and GMTS's overlap."""
    x, sel = applied.inputs, applied.selection
    if x.num_tokens == 0:
        return {}
    found = {"gmts/selected_fraction": float(sel.selected.double().mean())}
    if float(x.grad_proxy.sum()) > 0.0:
        by_entropy = (
            sel.selected if method == "entropy" else select(x, "entropy", ratio, scope).selected
        )
        by_gmts = sel.selected if method == "gmts" else select(x, "gmts", ratio, scope).selected
        found["gmts/overlap_entropy_gmts"] = overlap(by_entropy, by_gmts)["jaccard"]
        found["gmts/gradient_coverage"] = gradient_coverage(x.grad_proxy, sel.selected)
        for name, mask in (("entropy", by_entropy), ("gmts", by_gmts)):
            found[f"gmts/gradient_coverage_{name}"] = gradient_coverage(x.grad_proxy, mask)
    return found


def global_selection_inputs(
    rows: torch.Tensor,
    weights: torch.Tensor,
    answer_ids: torch.Tensor,
    group_ids: torch.Tensor,
    settings: ClipSettings,
    seed: int,
) -> SelectionInputs:
    """SelectionInputs of the gathered batch: ``rows`` (N, 6) = entropy, log p, g, advantage,
    log pi_old, log pi_ref per token; ``weights`` w_i per answer of TRL's loss type; omega_t from
    the ratio, clip and KL of TRL's loss (:mod:`gmts_core.methods.coefficient`), and the paper's
    own KL part beta (rho - 1) for gmts_paper(_verl) where TRL's loss has the bias-corrected one
    (whose derivative beta r log rho is in ``coefficient.kl``)."""
    entropy, logprob, grad_norm, advantage, old, ref = rows.unbind(dim=1)  # each (N,)
    w = weights[answer_ids.cpu()]  # (N,) per token
    coefficient = effective_coefficient(advantage, w, settings, logprob, old, ref)
    paper_kl = None
    if settings.bias_corrected_kl and settings.beta != 0.0:
        plain = dataclasses.replace(settings, bias_corrected_kl=False)
        paper_kl = effective_coefficient(advantage, w, plain, logprob, old, ref).kl
    x = selection_inputs(
        entropy=entropy,
        logprob=logprob,
        grad_norm=grad_norm,
        weight=w,
        answer_index=answer_ids.cpu(),
        group_index=group_ids.long(),
        coefficient=coefficient,
        seed=seed,
        advantage=advantage,
    )
    x.paper_kl_coef = paper_kl
    return x


def trainer_selection_inputs(
    trainer: Any,
    rows: torch.Tensor,
    lengths: torch.Tensor,
    answer_ids: torch.Tensor,
    group_ids: torch.Tensor,
    seed: int,
) -> SelectionInputs:
    """SelectionInputs of the gathered batch under ``trainer``'s loss: its aggregation
    (``trainer.aggregation``), clip (``epsilon_low``/``epsilon_high``, ``delta``) and KL
    (``beta``, ``use_bias_correction_kl``)."""
    args: Any = trainer.args
    settings = ClipSettings(
        trainer.epsilon_low,
        trainer.epsilon_high,
        trainer.beta,
        getattr(args, "delta", None),
        bool(getattr(args, "use_bias_correction_kl", False)),
    )
    weights = loss_weights(lengths, trainer.aggregation, max_length=trainer.max_completion_length)
    return global_selection_inputs(rows, weights, answer_ids, group_ids, settings, seed)


def budgeted_inputs(
    trainer: Any, x: SelectionInputs, valid: torch.Tensor, rule: str
) -> SelectionInputs:
    """``x`` under the budget ``rule`` (the trainer's ``selection_budget_over``,
    gmts_core.methods.budget): with ``content``, the tokenizer's special tokens among every
    process's completion tokens (gathered in the rows' order) leave the budget and are never
    selected."""
    special = None
    batch = getattr(trainer, "_batch", None)
    if rule == "content" and batch is not None and "completion_ids" in batch:
        ids = batch["completion_ids"].to(valid.device)[valid]  # (n,) this process's
        local = special_mask(ids, special_ids(trainer.processing_class)).to(valid.device)
        special = gather_rows(trainer.accelerator, local.unsqueeze(1).long())[0][:, 0].bool()
    return with_budget(x, rule, None if special is None else special.cpu())
