"""Where the UI gets its analyses: the local service layer, or a remote GMTS server's HTTP API.

Both backends take the JSON body of ``POST /v1/analyze`` and return its response model
(:class:`~app.schemas.analyze_response.AnalyzeResponse`): the local one as the service returns it,
the remote one validated from the JSON it receives, so the UI reads the same typed fields either
way. The same holds for ``/v1/gradcheck``, the live-RL sessions of ``/v1/sessions`` (create,
step, get, evaluate, reset), the runs and analysed runs, and what the server offers
(``GET /v1/capabilities``: its methods, reward rules and limits, which the UI's dropdowns list).
A compare run has no HTTP route, so only the local backend runs one. The remote
mode (``gmts serve --api-url URL`` or ``GMTS_API_URL``) lets a GPU server hold the models while
the UI runs elsewhere.

A busy server never shows a person a 429: both backends wait in the queue (up to
``GMTS_UI_QUEUE_WAIT_S``) and say so once with a notice, instead of failing. Both also notify a
waiting Analyze or training step its place in the queue and estimated wait as it changes: the local
backend from the job queue itself, the remote one by sending its own ``X-Request-ID`` and
polling ``GET /v1/queue/{request_id}`` while the request is outstanding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import gradio as gr
from pydantic import BaseModel

from app.schemas.analysed_runs import (
    AnalysedRunInfo,
    AnalysedRunsResponse,
    AnalysedStepsResponse,
    AnswersResponse,
    GroupsResponse,
    TokensResponse,
)
from app.schemas.analyze_response import AnalyzeResponse
from app.schemas.gradcheck import GradcheckResponse
from app.schemas.runs import (
    RunMetricsResponse,
    RunOverviewResponse,
    RunsResponse,
    RunStepResponse,
)
from app.schemas.server import CapabilitiesResponse
from app.schemas.sessions import EvaluationOut, SessionOut, StepOut
from app.services.compare import CompareResult
from app.services.validation import validation_message
from app.ui.status import LiveStatus
from gmts_core.compare_config import CompareConfig
from gmts_core.errors import GMTSError

logger = logging.getLogger(__name__)

Json = dict[str, Any]
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
CompareProgress = Callable[[int, int, str], None]  # (done, total, label)


class BackendError(GMTSError):
    """The backend refused or failed a request; the message is the server's own."""

    code = "backend_error"


# the body of each analysed-run query (``GET /v1/analysed-runs...``), by the query's name
ANALYSED_BODIES: dict[str, type[BaseModel]] = {
    "list": AnalysedRunsResponse,
    "run": AnalysedRunInfo,
    "steps": AnalysedStepsResponse,
    "groups": GroupsResponse,
    "answers": AnswersResponse,
    "tokens": TokensResponse,
    "rank_answers": AnswersResponse,
    "rank_tokens": TokensResponse,
}


def expect(body: BaseModel, model: type[M]) -> M:
    """``body`` as ``model``: an analysed-run query's body is typed by its name
    (:data:`ANALYSED_BODIES`); a body of another type is the backend's error."""
    if not isinstance(body, model):
        raise BackendError(f"the backend answered a {type(body).__name__}, not a {model.__name__}")
    return body


class Backend(Protocol):
    """What the UI needs from a backend."""

    label: str

    def analyze(self, request: Json, status: LiveStatus | None = None) -> AnalyzeResponse:
        """``POST /v1/analyze``; ``status`` hears the place in the queue and the stages (local)."""
        ...

    def models(self) -> tuple[list[str], str | None]:
        """Model names to offer, and the default one."""
        ...

    def capabilities(self) -> CapabilitiesResponse:
        """``GET /v1/capabilities``: the methods, reward rules and limits of the serving process."""
        ...

    def gradcheck(self, request: Json) -> GradcheckResponse:
        """``POST /v1/gradcheck``: the analysis with true per-token gradients and ``fidelity``."""
        ...

    def create_session(self, request: Json) -> SessionOut:
        """``POST /v1/sessions``: a new private session; its settings and (empty) history."""
        ...

    def step_session(
        self, session_id: str, request: Json, status: LiveStatus | None = None
    ) -> StepOut:
        """``POST /v1/sessions/{id}/step``: metrics of the steps run, and the last batch."""
        ...

    def get_session(self, session_id: str) -> SessionOut:
        """``GET /v1/sessions/{id}``: settings, step history and evaluations."""
        ...

    def evaluate_session(self, session_id: str, request: Json) -> EvaluationOut:
        """``POST /v1/sessions/{id}/evaluate``: held-out accuracy now (kept in the history)."""
        ...

    def reset_session(self, session_id: str) -> SessionOut:
        """``POST /v1/sessions/{id}/reset``: back to the starting weights, empty history."""
        ...

    def compare(
        self, model: str | None, config: CompareConfig, progress: CompareProgress | None = None
    ) -> CompareResult:
        """A compare run's result; the local backend only."""
        ...

    def runs(self) -> RunsResponse:
        """``GET /v1/runs``: the training runs under the server's run roots."""
        ...

    def run_overview(self, run_id: str) -> RunOverviewResponse:
        """``GET /v1/runs/{id}``: the run's steps and per-step numbers."""
        ...

    def run_step(self, run_id: str, step: int, params: Json) -> RunStepResponse:
        """``GET /v1/runs/{id}/steps/{n}``: one step's groups (logged or analysed)."""
        ...

    def run_metrics(self, run_id: str, params: Json) -> RunMetricsResponse:
        """``GET /v1/runs/{id}/metrics``: the rows over steps computed so far (and progress)."""
        ...

    def analysed(self, kind: str, run_id: str = "", params: Json | None = None) -> BaseModel:
        """``GET /v1/analysed-runs...``: one query of an analysed run by name (``kind`` as in
        ``app.services.analysed_runs.QUERIES``: list, steps, groups, answers, tokens,
        rank_answers, rank_tokens), its body the model :data:`ANALYSED_BODIES` names."""
        ...


DEFAULT_QUEUE_WAIT_S = 900.0


def notify_person(message: str) -> None:
    """A notice in the UI (a Gradio toast) when called from an event, else a log line."""
    logger.info(message)
    try:
        gr.Info(message)
    except Exception:  # outside a Gradio event there is nobody to notify
        pass


__all__ = ["Backend", "BackendError", "validation_message"]
