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

The gradients themselves come from :mod:`gmts_core.experiments.token_gradients` (exact,
block by block, the base model untouched).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

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
from gmts_core.experiments.token_gradients import (
    DEFAULT_BATCH_ELEMENTS,
    PRECISIONS,
    TokenGradients,
    exact_token_gradients,
)
from gmts_core.knobs import DEFAULT_GRADCHECK_MAX_TOKENS as DEFAULT_MAX_TOKENS
from gmts_core.model.loading import LoadedModel
from gmts_core.progress import StageCallback, no_stage
from gmts_core.stats.tokenization import encode_prompt

logger = logging.getLogger(__name__)


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
