"""/v1/sessions: private policies for live GRPO steps (create, step, inspect, reset, delete)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request, Response

from app.api.deps import ServicesDep
from app.api.rendering import json_response
from app.api.routes.common import error_responses
from app.schemas.sessions import (
    EvaluationOut,
    SessionCreateRequest,
    SessionEvalRequest,
    SessionOut,
    SessionStepRequest,
    StepOut,
)

router = APIRouter(prefix="/sessions", tags=["sessions"])

SessionId = Annotated[str, Path(min_length=1, max_length=128, description="From POST /sessions.")]


@router.post(
    "",
    status_code=201,
    response_model=SessionOut,
    summary="Create a session: a private trainable copy of the model with its RL settings.",
    responses=error_responses(401, 404, 413, 422, 429, 503),
)
async def create_session(
    request: Request,
    services: ServicesDep,
    req: Annotated[SessionCreateRequest, Body()] | None = None,
) -> SessionOut:
    """Returns `session_id`, the settings and an empty history. The base model is never changed.
    A client (its address) holds at most `GMTS_MAX_SESSIONS_PER_CLIENT` sessions (429 beyond)."""
    # the client is the connection's address (a trusted proxy's X-Forwarded-For): one server
    # key is shared by all its users, so the key names no one
    client = request.client.host if request.client else ""
    return await services.sessions.create_queued(req or SessionCreateRequest(), client)


@router.post(
    "/{session_id}/step",
    response_model=StepOut,
    summary="Run GRPO steps with a selection method; metrics and per-token log-prob changes.",
    responses=error_responses(401, 404, 413, 422, 429, 503),
)
async def step_session(
    session_id: SessionId,
    services: ServicesDep,
    req: Annotated[SessionStepRequest, Body()] | None = None,
) -> Response:
    """Without `prompts`, each step draws a batch from the demo task. Knobs given here apply to
    these steps only. 429 while another step of this session runs."""
    return await json_response(
        await services.sessions.step_queued(session_id, req or SessionStepRequest())
    )


@router.get(
    "/{session_id}",
    response_model=SessionOut,
    summary="A session's settings and step history.",
    responses=error_responses(401, 404),
)
def get_session(session_id: SessionId, services: ServicesDep) -> SessionOut:
    return services.sessions.info(session_id)


@router.post(
    "/{session_id}/evaluate",
    response_model=EvaluationOut,
    summary="Held-out accuracy of the session's policy on the demo task (recorded in history).",
    responses=error_responses(401, 404, 413, 422, 429, 503),
)
async def evaluate_session(
    session_id: SessionId,
    services: ServicesDep,
    req: Annotated[SessionEvalRequest, Body()] | None = None,
) -> EvaluationOut:
    return await services.sessions.evaluate_queued(session_id, req or SessionEvalRequest())


@router.post(
    "/{session_id}/reset",
    response_model=SessionOut,
    summary="Back to the starting weights (bit-identical), fresh optimizer, empty history.",
    responses=error_responses(401, 404, 429, 503),
)
async def reset_session(session_id: SessionId, services: ServicesDep) -> SessionOut:
    return await services.sessions.reset_queued(session_id)


@router.delete(
    "/{session_id}",
    status_code=204,
    summary="Delete a session and free its policy.",
    responses=error_responses(401, 404),
)
def delete_session(session_id: SessionId, services: ServicesDep) -> Response:
    services.sessions.delete(session_id)
    return Response(status_code=204)
