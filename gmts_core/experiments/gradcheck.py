"""True per-token gradients of the GRPO loss, to measure how well each selection score tracks them.

For answer i and token t the GRPO loss term is l_it = -w_i A_i log pi(y_it) (the GRPO loss), and
theta is every parameter of the model (a tied embedding/head matrix counted once). We compute

    true_grad_norm   ||d l_it / d theta||_2                       exact, full-parameter
    head_grad_norm   gamma_it * ||h_it|| = ||d l_it / d W||_2 through the output projection z = W h

and the fidelity report of each selection method m with selected set S_m:

    spearman[m]               Spearman(score_m, true_grad_norm): all tokens ("batch") and the
                              median of the per-answer correlations ("within_answer_median")
    true_grad_coverage[m]     sum_{S_m} ||G_t|| / sum_all ||G_t||     (true gradient mass kept;
                              the same definition as the proxy's gradient_coverage)
    true_grad_sq_coverage[m]  sum_{S_m} ||G_t||^2 / sum_all ||G_t||^2
    cosine_to_full[m]         cos(g_S, g) with g_S = sum_{S_m} G_t and g = sum_all G_t = dL/dtheta
                              (does the selection keep the direction of the update? `all` is 1)
    norm_ratio_to_full[m]     ||g_S|| / ||g||

where G_t = d l_t / d theta. With untied embeddings head_grad_norm is also the norm of the
gradient of l_t with respect to the LM-head weight. With tied embeddings the head weight is the
embedding matrix: head_grad_norm is then only the output-projection part of that matrix's
gradient (the input-embedding part is left out of it, but true_grad_norm includes it). Models
with final logit soft-capping (Gemma 2) break the formula; true_grad_norm stays exact.

Method: one forward per answer through ``torch.func.functional_call`` on detached copies of the
parameters (the base model is never touched, its parameters need no grad), then one vmapped
backward (``autograd.grad(..., is_grads_batched=True)``) per block of tokens: the block's B
per-token gradients exist at once (B * P numbers, bounded by ``batch_elements``), and we keep
only their squared norms and the running sums g_S per method. Tokens of answers with A_i = 0
have zero gradients and need no backward.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import functional_call

from gmts_core.analysis.analyze import (
    ANALYZE_STAGES,
    AnalysisConfig,
    GroupInput,
    TokenLimit,
    analyze,
)
from gmts_core.analysis.records import AnalysisResult
from gmts_core.analysis.summaries import gradient_coverage, spearman_by_answer
from gmts_core.errors import InvalidInputError, LimitExceededError
from gmts_core.model.loading import LoadedModel
from gmts_core.progress import StageCallback, no_stage
from gmts_core.stats.tokenization import encode_prompt

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 1024
DEFAULT_BATCH_ELEMENTS = 2**26  # per-token gradient numbers held at once (256 MiB in float32)
PRECISIONS: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class TokenGradients:
    """Exact per-token gradient quantities of N answer tokens in flat (answer, position) order."""

    true_norm: torch.Tensor  # (N,) float64 ||d l_t / d theta||
    head_norm: torch.Tensor  # (N,) float64 gamma_t ||h_t|| (output-projection part)
    head_param_norm: torch.Tensor  # (N,) float64 ||d l_t / d W_out|| by autograd (all paths)
    logprob: torch.Tensor  # (N,) float64 log pi(y_t) recomputed in the compute precision
    selected_norm: dict[str, float]  # ||g_S|| per mask
    selected_dot_full: dict[str, float]  # <g_S, g> per mask
    full_norm: float  # ||g||, g = dL/dtheta
    num_parameters: int
    tied_embeddings: bool
    seconds: float


def _detached_params(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Leaf copies of the parameters (no storage copy when the dtype already matches)."""
    return {name: p.detach().to(dtype).requires_grad_(True) for name, p in model.named_parameters()}


def _head_param_index(model: Any) -> tuple[int, bool]:
    """Index of the output-embedding weight in ``named_parameters()``, and whether it is tied."""
    head = model.get_output_embeddings().weight
    by_id = {id(p): i for i, (_, p) in enumerate(model.named_parameters())}
    tied = head is model.get_input_embeddings().weight
    return by_id[id(head)], tied


def _answer_forward(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    seq: tuple[list[int], list[int]],
    coef: float,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token losses (L,), head formula norms (L,) and log-probs (L,) of one answer."""
    prompt, answer = seq
    device = next(iter(params.values())).device
    ids = torch.tensor([prompt + answer], device=device)  # (1, T)
    out = functional_call(model, params, (ids,), {"use_cache": False, "output_hidden_states": True})
    start, n = len(prompt) - 1, len(answer)  # position t predicts token t + 1
    z = out.logits[0, start : start + n] / temperature  # (L, V)
    h = out.hidden_states[-1][0, start : start + n]  # (L, D) the input of the LM head
    targets = torch.tensor(answer, device=device)
    logp = z.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)  # (L,)
    with torch.no_grad():
        # d l / d z = -coef (e_y - pi) / tau, so ||d l / d W|| = |coef| ||e_y - pi|| ||h|| / tau
        delta = z.softmax(-1)
        delta[torch.arange(n, device=device), targets] -= 1.0
        head = abs(coef) * delta.norm(dim=-1) * h.norm(dim=-1) / temperature
    return -coef * logp, head.double(), logp.detach().double()


def _block_grads(
    losses: torch.Tensor, params: list[torch.Tensor], start: int, stop: int
) -> list[torch.Tensor]:
    """Gradients of losses[start:stop] w.r.t. each parameter, each (B, *param.shape)."""
    if stop - start == 1:
        grads = torch.autograd.grad(
            losses[start], params, retain_graph=True, materialize_grads=True
        )
        return [g.unsqueeze(0) for g in grads]
    eye = torch.eye(losses.numel(), dtype=losses.dtype, device=losses.device)[start:stop]
    try:
        return list(
            torch.autograd.grad(
                losses,
                params,
                grad_outputs=eye,
                retain_graph=True,
                is_grads_batched=True,
                materialize_grads=True,
            )
        )
    except RuntimeError as exc:  # an op without a vmap rule: fall back to one backward per token
        logger.warning("batched per-token backward failed (%s); using a loop", exc)
        per_token = [_block_grads(losses, params, t, t + 1) for t in range(start, stop)]
        return [torch.cat(parts) for parts in zip(*per_token, strict=True)]


class _Accumulator:
    """Per-token squared norms and the running gradient sums g_S of each mask (and of all).

    A block's products are formed in the compute precision (at most ``block`` terms each) and
    accumulated across blocks and parameters in float64.
    """

    def __init__(self, params: list[torch.Tensor], masks: torch.Tensor, head_index: int) -> None:
        # (M + 1, N) in the compute dtype; the last row is all ones (the full loss)
        self.masks_t = masks.T.to(params[0].dtype)
        self.head_index = head_index
        self.sums = [
            torch.zeros((masks.shape[1], *p.shape), dtype=torch.float64, device=p.device)
            for p in params
        ]  # each (M + 1, *param.shape)
        n = masks.shape[0]
        self.true_sq = torch.zeros(n, dtype=torch.float64)
        self.head_sq = torch.zeros(n, dtype=torch.float64)

    def add(self, rows: slice, grads: list[torch.Tensor]) -> None:
        sq = torch.zeros(rows.stop - rows.start, dtype=torch.float64, device=grads[0].device)
        masks_t = self.masks_t[:, rows]  # (M + 1, B)
        for i, (acc, g) in enumerate(zip(self.sums, grads, strict=True)):
            flat = g.flatten(1)  # (B, p)
            g_sq = torch.einsum("bp,bp->b", flat, flat).double()  # (B,)
            sq += g_sq
            if i == self.head_index:
                self.head_sq[rows] = g_sq.cpu()
            acc.view(acc.shape[0], -1).add_(masks_t @ flat)  # (M + 1, p)
        self.true_sq[rows] = sq.cpu()

    def gram(self) -> torch.Tensor:
        """(M + 1, M + 1) inner products <g_a, g_b> of the accumulated sums."""
        gram = torch.zeros(len(self.masks_t), len(self.masks_t), dtype=torch.float64)
        for acc in self.sums:
            flat = acc.view(acc.shape[0], -1)  # (M + 1, p)
            gram += (flat @ flat.T).cpu()
        return gram


@contextlib.contextmanager
def experts_for(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[None]:
    """Mixture-of-experts models (Mixtral, Qwen2-MoE, ...) run their experts with a grouped
    matrix-multiply kernel that has no float64 version: in float64 the experts run eagerly
    (``set_experts_implementation("eager")``, restored afterwards). A model whose experts
    cannot be switched is refused with an error saying so."""
    config = getattr(model, "config", None)
    current = getattr(config, "_experts_implementation", None)
    if dtype != torch.float64 or current in (None, "eager"):
        yield
        return
    setter = getattr(model, "set_experts_implementation", None)
    try:
        if setter is None:
            raise ValueError("the model has no set_experts_implementation")
        setter("eager")
    except (ValueError, RuntimeError, ImportError) as exc:
        raise InvalidInputError(
            f"this model's experts run with the {current!r} kernel, which has no float64 "
            f"version, and cannot be switched to eager ({exc}); use --precision float32"
        ) from None
    try:
        yield
    finally:
        setter(current)


def exact_token_gradients(
    model: torch.nn.Module,
    sequences: Sequence[tuple[list[int], list[int]]],
    coefs: Sequence[float],
    temperature: float,
    masks: dict[str, torch.Tensor],
    precision: str = "float32",
    batch_elements: int = DEFAULT_BATCH_ELEMENTS,
) -> TokenGradients:
    """Exact per-token gradients of l_t = -coef_i log pi(y_t) for (prompt_ids, answer_ids) pairs.

    ``coefs``: w_i A_i per answer. ``masks``: name -> (N,) bool over the flat answer tokens;
    for each, g_S (the gradient of the loss restricted to the masked tokens) is accumulated.
    """
    if precision not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    started = time.perf_counter()
    params = _detached_params(model, PRECISIONS[precision])
    plist = list(params.values())
    head_index, tied = _head_param_index(model)
    num_params = sum(p.numel() for p in plist)
    block = max(1, batch_elements // max(num_params, 1))
    n = sum(len(a) for _, a in sequences)
    names = list(masks)
    columns = [masks[m].bool().cpu() for m in names] + [torch.ones(n, dtype=torch.bool)]
    acc = _Accumulator(plist, torch.stack(columns, dim=1).to(plist[0].device), head_index)
    head, logprob = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    offset = 0
    with experts_for(model, PRECISIONS[precision]), _float64_errors(precision):
        for seq, coef in zip(sequences, coefs, strict=True):
            length = len(seq[1])
            losses, head_norm, lp = _answer_forward(model, params, seq, float(coef), temperature)
            head[offset : offset + length], logprob[offset : offset + length] = (
                head_norm.cpu(),
                lp.cpu(),
            )
            for s in range(0, length if coef != 0 else 0, block):
                stop = min(s + block, length)
                acc.add(slice(offset + s, offset + stop), _block_grads(losses, plist, s, stop))
            offset += length
    gram = acc.gram()
    full = len(names)
    return TokenGradients(
        true_norm=acc.true_sq.sqrt(),
        head_norm=head,
        head_param_norm=acc.head_sq.sqrt(),
        logprob=logprob,
        selected_norm={m: math.sqrt(max(float(gram[i, i]), 0.0)) for i, m in enumerate(names)},
        selected_dot_full={m: float(gram[i, full]) for i, m in enumerate(names)},
        full_norm=math.sqrt(max(float(gram[full, full]), 0.0)),
        num_parameters=num_params,
        tied_embeddings=tied,
        seconds=time.perf_counter() - started,
    )


@contextlib.contextmanager
def _float64_errors(precision: str) -> Iterator[None]:
    """A kernel without a float64 version (a dtype error from inside the model) becomes an
    error naming the precision, not a raw traceback."""
    try:
        yield
    except RuntimeError as exc:
        text = str(exc)
        if precision != "float64" or not ("Double" in text or "float64" in text):
            raise
        raise InvalidInputError(
            f"this model does not run in float64 (a kernel of its forward has no float64 "
            f"version: {text.splitlines()[0][:160]}); use --precision float32"
        ) from None


@dataclass
class FlatSelections:
    """An analysis's per-token scores and selections in flat (group, answer, position) order."""

    scores: dict[str, torch.Tensor]  # method -> (N,) float64
    selected: dict[str, torch.Tensor]  # method -> (N,) bool
    answer_index: torch.Tensor  # (N,) int64 global answer index
    logprob: torch.Tensor  # (N,) float64 as the analysis computed it


def flat_selections(analysis: AnalysisResult) -> FlatSelections:
    """Gather every method's scores and flags from an analysis's token records."""
    methods = list(analysis.config.methods)
    answers = [a for _, a in analysis.iter_answers()]
    tokens = [t for a in answers for t in a.tokens]
    return FlatSelections(
        scores={
            m: torch.tensor([t.scores[m] for t in tokens], dtype=torch.float64) for m in methods
        },
        selected={
            m: torch.tensor([t.selected[m] for t in tokens], dtype=torch.bool) for m in methods
        },
        answer_index=torch.tensor([i for i, a in enumerate(answers) for _ in a.tokens]),
        logprob=torch.tensor([t.logprob for t in tokens], dtype=torch.float64),
    )


def _cosine(dot: float, a: float, b: float) -> float | None:
    """cos = dot / (a b) clamped to [-1, 1]; None when either vector is zero."""
    return None if a == 0.0 or b == 0.0 else max(-1.0, min(1.0, dot / (a * b)))


def fidelity_report(flat: FlatSelections, grads: TokenGradients) -> dict[str, Any]:
    """How well each method's score ranks the true norms, and what its selection keeps."""
    true = grads.true_norm
    full = grads.full_norm
    methods = list(flat.scores)
    report: dict[str, Any] = {
        "num_tokens": int(true.numel()),
        "num_parameters": grads.num_parameters,
        "tied_embeddings": grads.tied_embeddings,
        "full_grad_norm": full,
        "spearman": {
            m: spearman_by_answer(flat.scores[m], true, flat.answer_index) for m in methods
        },
        "spearman_head": spearman_by_answer(grads.head_norm, true, flat.answer_index),
        "true_grad_coverage": {m: gradient_coverage(true, flat.selected[m]) for m in methods},
        "true_grad_sq_coverage": {m: gradient_coverage(true**2, flat.selected[m]) for m in methods},
        "cosine_to_full": {
            m: _cosine(grads.selected_dot_full[m], grads.selected_norm[m], full) for m in methods
        },
        "norm_ratio_to_full": {m: grads.selected_norm[m] / full if full else None for m in methods},
        "max_abs_logprob_diff": float((grads.logprob - flat.logprob).abs().max())
        if true.numel()
        else 0.0,
        "seconds": grads.seconds,
        "notes": _notes(grads),
    }
    return report


def _notes(grads: TokenGradients) -> list[str]:
    notes = []
    if grads.full_norm == 0.0:
        notes.append("every advantage is 0: the loss has no gradient, cosines are undefined")
    if grads.tied_embeddings:
        notes.append(
            "tied embeddings: head_grad_norm is the output-projection part of the shared "
            "embedding matrix's gradient; true_grad_norm also includes its input-embedding part"
        )
    return notes


@dataclass
class GradcheckResult:
    """An analysis with exact per-token gradient norms and the fidelity report."""

    analysis: AnalysisResult
    gradients: TokenGradients
    fidelity: dict[str, Any]
    precision: str


def check_analysis(
    lm: LoadedModel,
    analysis: AnalysisResult,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    precision: str = "float32",
    batch_elements: int = DEFAULT_BATCH_ELEMENTS,
) -> GradcheckResult:
    """Exact per-token gradients and the fidelity report of an existing analysis."""
    config = analysis.config
    sequences, coefs = [], []
    for group, answer in analysis.iter_answers():
        prompt_ids = encode_prompt(lm.tokenizer, group.prompt, config.chat_template)
        sequences.append((prompt_ids, [t.id for t in answer.tokens]))
        coefs.append(answer.weight * answer.advantage)
    n = sum(len(a) for _, a in sequences)
    if n > max_tokens:
        raise LimitExceededError(
            f"{n} answer tokens exceed the exact-gradient limit of {max_tokens} "
            "(each token needs its own backward pass); use fewer or shorter answers"
        )
    flat = flat_selections(analysis)
    grads = exact_token_gradients(
        lm.model, sequences, coefs, config.temperature, flat.selected, precision, batch_elements
    )
    report = fidelity_report(flat, grads)
    logger.info("gradcheck: %d tokens, %.2f s", n, grads.seconds)
    return GradcheckResult(analysis, grads, report, precision)


def gradcheck(
    lm: LoadedModel,
    groups: Sequence[GroupInput],
    config: AnalysisConfig = AnalysisConfig(),
    max_tokens: int = DEFAULT_MAX_TOKENS,
    precision: str = "float32",
    on_stage: StageCallback | None = None,
    token_limit: TokenLimit | None = None,
) -> GradcheckResult:
    """Analyze ``groups`` (as :func:`analyze`, ``token_limit`` included), then check every
    score against true gradients.

    ``on_stage`` hears the analysis's stages, then "exact per-token gradients"."""
    if max_tokens < 1:
        raise InvalidInputError(f"max_tokens must be >= 1, got {max_tokens}")
    if precision not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    # the true gradients are those of l_it = -w_i A_i log pi (no KL term), so the scores are
    # taken with the same coefficient (omega = A) even for a session's policy trained with KL
    total = ANALYZE_STAGES + 1
    report = on_stage or no_stage
    analysis = analyze(
        lm,
        groups,
        dataclasses.replace(config, beta=0.0),
        lambda n, d, _t: report(n, d, total),
        token_limit,
    )
    report("exact per-token gradients", ANALYZE_STAGES, total)
    return check_analysis(lm, analysis, max_tokens, precision)
