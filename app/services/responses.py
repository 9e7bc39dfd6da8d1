"""The one mapping from the library's typed results to the API's response models.

The pydantic models (``app.schemas``, ``app.schemas.gradcheck``, ``app.schemas.sessions``) are the
contract; the library returns dataclasses (``gmts_core.analysis.records``, ``grpo.records``,
``experiments.sessions``, ``experiments.gradcheck``) with raw floats. Every response body is built
here and nowhere else: the routes return these models, and the UI's local backend and the CLI print
their JSON form (:func:`as_json`), so each front end shows exactly what ``POST /v1/...`` returns.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from pydantic import BaseModel

from app.schemas.analyze_response import (
    AnalysisSettingsOut,
    AnalyzeResponse,
    AnswerOut,
    DifferencesOut,
    GroupOut,
    GroupSummary,
    RewardDetail,
    Summary,
    TokenOut,
)
from app.schemas.gradcheck import FidelityOut, GradcheckResponse
from app.schemas.methods import MethodOut
from app.schemas.numbers import finite, num
from app.schemas.sessions import (
    AnswerChangeOut,
    EvaluationOut,
    SessionOut,
    StepMetricsOut,
    StepOut,
)
from gmts_core.analysis.difference_reasons import all_differences
from gmts_core.analysis.records import AnalysisResult, AnswerRecord, GroupRecord, TokenRecord
from gmts_core.experiments.gradcheck import GradcheckResult
from gmts_core.experiments.sessions import Session, SessionEvaluation
from gmts_core.grpo.records import AnswerChange, StepMetrics, StepResult
from gmts_core.methods.catalog import MethodInfo

M = TypeVar("M", bound=BaseModel)
TokenExtras = list[dict[str, float | None]]  # per answer token, in (group, answer, position) order


def as_json(model: BaseModel) -> dict[str, Any]:
    """A response model as the JSON dict an HTTP client receives (unset optional keys left out,
    as the routes do with ``response_model_exclude_unset``)."""
    return model.model_dump(mode="json", exclude_unset=True)


# --- POST /v1/analyze and /v1/gradcheck --------------------------------------------------------


def result_notes(result: AnalysisResult) -> list[str]:
    """Plain-language remarks a user should not miss (zero-signal groups, cut answers)."""
    notes: list[str] = []
    s = result.summary
    n_groups = len(result.groups)
    if n_groups == 1 and s["zero_signal"]:
        r = result.groups[0].answers[0].reward if result.groups[0].answers else 0.0
        notes.append(
            f"All rewards in this group are equal ({r:g}), so every advantage is 0: this group "
            "carries no learning signal and every token's gradient proxy is 0. Sample more "
            "answers or use a harder/easier prompt to get mixed rewards."
        )
    elif s["num_zero_signal_groups"]:
        zero = [g.index for g in result.groups if g.summary.get("zero_signal")]
        notes.append(
            f"{len(zero)} of {n_groups} groups have equal rewards and carry no learning signal "
            f"(groups {', '.join(map(str, zero))}); wasted_share shows how much of each method's "
            "selection lands on their tokens."
        )
    cut = sum(not a.finished for _, a in result.iter_answers())
    if cut:
        notes.append(
            f"{cut} sampled answer(s) reached max_new_tokens without an end-of-sequence token."
        )
    return notes


def analysis_json(result: AnalysisResult) -> dict[str, Any]:
    """The JSON body of ``POST /v1/analyze`` for ``result``, as an HTTP client receives it."""
    return as_json(analysis_response(result))


def token_out(t: TokenRecord, extra: dict[str, float | None] | None = None) -> TokenOut:
    fields: dict[str, Any] = {
        "position": t.position,
        "id": t.id,
        "text": t.text,
        "logprob": num(t.logprob),
        "prob": num(t.prob),
        "entropy": num(t.entropy),
        "grad_norm": num(t.grad_norm),
        "grad_proxy": num(t.grad_proxy),
        "ratio": num(t.ratio),
        "clipped": t.clipped,
        "coef": num(t.coef),
        "scores": {m: num(v) for m, v in t.scores.items()},
        "ranks": t.ranks,
        "selected": t.selected,
        "alternatives": t.alternatives,
        "trained": t.trained,
    }
    if t.grad_head is not None:
        fields["grad_head"] = num(t.grad_head)
    return TokenOut.model_validate({**fields, **(extra or {})})


def answer_out(a: AnswerRecord, extras: TokenExtras | None = None) -> AnswerOut:
    return AnswerOut(
        index=a.index,
        text=a.text,
        reward=a.reward,
        reward_detail=RewardDetail.model_validate(dataclasses.asdict(a.reward_detail)),
        advantage=a.advantage,
        weight=a.weight,
        length=a.length,
        finished=a.finished,
        tokenization=a.tokenization,
        selected_count=a.selected_count(),
        tokens=[token_out(t, extras[i] if extras else None) for i, t in enumerate(a.tokens)],
    )


def _answers(g: GroupRecord, extras: TokenExtras | None, start: int) -> list[AnswerOut]:
    out = []
    for a in g.answers:
        out.append(answer_out(a, extras[start : start + a.length] if extras else None))
        start += a.length
    return out


def _analysis_fields(
    result: AnalysisResult, notes: list[str], extras: TokenExtras | None
) -> dict[str, Any]:
    """Single-group form: the group's prompt and answers at top level; batch form: ``groups``."""
    fields: dict[str, Any] = {
        "model": result.model,
        "summary": Summary.model_validate(result.summary),
        "settings": AnalysisSettingsOut.model_validate(result.config, from_attributes=True),
        "notes": notes,
        "differences": differences_out(result),
    }
    if len(result.groups) == 1:
        g = result.groups[0]
        return {**fields, "prompt": g.prompt, "answers": _answers(g, extras, 0)}
    groups, start = [], 0
    for g in result.groups:
        summary = GroupSummary.model_validate(g.summary)
        answers = _answers(g, extras, start)
        groups.append(GroupOut(index=g.index, prompt=g.prompt, answers=answers, summary=summary))
        start += sum(a.length for a in g.answers)
    return {**fields, "groups": groups}


def differences_out(result: AnalysisResult) -> list[DifferencesOut]:
    """Why they differ, for every pair of the analysis's methods."""
    return [DifferencesOut.model_validate(d, from_attributes=True) for d in all_differences(result)]


def analysis_response(result: AnalysisResult) -> AnalyzeResponse:
    """The body of ``POST /v1/analyze``: the analysis plus its plain-language notes."""
    return AnalyzeResponse(**_analysis_fields(result, result_notes(result), None))


def gradcheck_response(result: GradcheckResult) -> GradcheckResponse:
    """The body of ``POST /v1/gradcheck``: the analysis, each token with its exact gradient norms
    (``true_grad_norm``, ``head_grad_norm``), and the fidelity report."""
    true, head = result.gradients.true_norm.tolist(), result.gradients.head_norm.tolist()
    extras: TokenExtras = [
        {"true_grad_norm": num(t), "head_grad_norm": num(h)}
        for t, h in zip(true, head, strict=True)
    ]
    fields = _analysis_fields(result.analysis, result_notes(result.analysis), extras)
    fidelity = FidelityOut.model_validate(
        finite({"precision": result.precision, **result.fidelity})
    )
    return GradcheckResponse(**fields, fidelity=fidelity)


# --- /v1/sessions ------------------------------------------------------------------------------


def step_metrics_out(m: StepMetrics) -> StepMetricsOut:
    return StepMetricsOut.model_validate(m, from_attributes=True)


def answer_change_out(a: AnswerChange) -> AnswerChangeOut:
    return AnswerChangeOut.model_validate(a, from_attributes=True)


def evaluation_out(e: SessionEvaluation) -> EvaluationOut:
    return EvaluationOut.model_validate({"step": e.step, **dataclasses.asdict(e.result)})


def session_out(session: Session) -> SessionOut:
    """A session's settings and history (``GET /v1/sessions/{id}``): while a step runs, the
    steps already saved (:attr:`gmts_core.experiments.sessions.Session.shown_history`)."""
    shown = session.shown_history
    return SessionOut(
        session_id=session.id,
        model=session.policy.base.name,
        policy_kind=session.policy.kind,
        trainable_parameters=session.policy.num_trainable,
        seed=session.seed,
        settings=dataclasses.asdict(session.config),
        steps_done=len(shown),
        history=[step_metrics_out(m) for m in shown],
        evaluations=[evaluation_out(e) for e in session.evaluations],
    )


def step_out(session: Session, results: list[StepResult], include_tokens: bool) -> StepOut:
    """The steps just run and, if asked, the last step's batch with its log-prob changes."""
    last = results[-1] if results and include_tokens else None
    return StepOut(
        session_id=session.id,
        steps_done=session.steps_done,
        steps=[step_metrics_out(r.metrics) for r in results],
        last_batch=[answer_change_out(a) for a in last.answers] if last else None,
    )


def method_out(info: MethodInfo) -> MethodOut:
    """A selection method's catalog entry as its response model."""
    return MethodOut(**dataclasses.asdict(info))
