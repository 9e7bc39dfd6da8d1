"""The UI's local backend: the in-process service layer, in the server's own job queue (the same
code path as the API's routes; the place in the queue comes from the job queue itself). It returns
the services' response models as they are: the same models the remote backend validates from the
JSON of the HTTP API."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from pydantic import BaseModel

from app.schemas.analyze_request import AnalyzeRequest
from app.schemas.analyze_response import AnalyzeResponse
from app.schemas.gradcheck import GradcheckRequest, GradcheckResponse
from app.schemas.runs import RunMetricsResponse, RunOverviewResponse, RunsResponse, RunStepResponse
from app.schemas.server import CapabilitiesResponse
from app.schemas.sessions import (
    EvaluationOut,
    SessionCreateRequest,
    SessionEvalRequest,
    SessionOut,
    SessionStepRequest,
    StepOut,
)
from app.services.analysed_runs import query as analysed_query
from app.services.catalog import ANALYSIS_DEFAULTS, capabilities
from app.services.compare import CompareResult
from app.services.container import Services
from app.services.jobs import wait_in_queue
from app.services.runs import StepOptions
from app.services.validation import validated
from app.ui.client import (
    ANALYSED_BODIES,
    DEFAULT_QUEUE_WAIT_S,
    CompareProgress,
    Json,
    T,
    expect,
    notify_person,
)
from app.ui.status import LiveStatus
from gmts_core.compare_config import CompareConfig


class LocalBackend:
    """Calls the in-process service layer (the same code path as the API's route)."""

    label = "local"

    def __init__(self, services: Services, on_wait: Callable[[str], None] = notify_person) -> None:
        self.services = services
        settings = getattr(services, "settings", None)
        self.wait_s = float(getattr(settings, "ui_queue_wait_s", DEFAULT_QUEUE_WAIT_S))
        self.on_wait = on_wait

    def _in_queue(self, status: LiveStatus | None = None) -> AbstractContextManager[None]:
        on_position = None
        if status is not None:
            jobs = self.services.jobs

            def on_position(place: int) -> None:  # the place and the queue's estimate for it
                status.position(place, jobs.estimate_wait_s(place))

        return wait_in_queue(self.wait_s, self.on_wait, on_position)

    def _job(self, work: Callable[[], T], status: LiveStatus | None = None) -> T:
        """``work()`` (a service core) in the job queue, waiting in it as a person does."""
        with self._in_queue(status):
            return self.services.jobs.run_blocking(work)

    def analyze(self, request: Json, status: LiveStatus | None = None) -> AnalyzeResponse:
        req = validated(AnalyzeRequest, request)
        on_stage = status.stage if status is not None else None
        run = self.services.analysis.run
        return self._job(lambda: run(req, on_stage=on_stage), status)

    def job_load(self) -> tuple[int, int]:
        """(running, waiting) heavy jobs of this server now (for the UI's progress line)."""
        jobs = self.services.jobs
        return int(jobs.running), int(jobs.waiting)

    def models(self) -> tuple[list[str], str | None]:
        names = [m["alias"] for m in self.services.models.list_models()]
        return names, self.services.settings.default_model

    def capabilities(self) -> CapabilitiesResponse:
        return capabilities(self.services.settings)

    def gradcheck(self, request: Json) -> GradcheckResponse:
        req = validated(GradcheckRequest, request)
        return self._job(lambda: self.services.gradcheck.run(req))

    def create_session(self, request: Json) -> SessionOut:
        req = validated(SessionCreateRequest, request)
        return self._job(lambda: self.services.sessions.create(req))

    def step_session(
        self, session_id: str, request: Json, status: LiveStatus | None = None
    ) -> StepOut:
        req = validated(SessionStepRequest, request)
        on_stage = status.stage if status is not None else None
        step = self.services.sessions.step
        return self._job(lambda: step(session_id, req, on_stage=on_stage), status)

    def get_session(self, session_id: str) -> SessionOut:
        return self.services.sessions.info(session_id)

    def evaluate_session(self, session_id: str, request: Json) -> EvaluationOut:
        req = validated(SessionEvalRequest, request)
        return self._job(lambda: self.services.sessions.evaluate(session_id, req))

    def reset_session(self, session_id: str) -> SessionOut:
        return self._job(lambda: self.services.sessions.reset(session_id))

    def compare(
        self, model: str | None, config: CompareConfig, progress: CompareProgress | None = None
    ) -> CompareResult:
        """Run a compare in a job slot (it holds the slot for its whole run)."""
        run = self.services.compare.run
        return self._job(lambda: run(model, config, progress))

    def runs(self) -> RunsResponse:
        return self.services.runs.list_runs()

    def run_overview(self, run_id: str) -> RunOverviewResponse:
        return self.services.runs.overview(run_id)

    def run_step(self, run_id: str, step: int, params: Json) -> RunStepResponse:
        options = _step_options(params)
        return self._job(lambda: self.services.runs.step_view(run_id, int(step), options))

    def run_metrics(self, run_id: str, params: Json) -> RunMetricsResponse:
        return self.services.run_metrics.get(run_id, _step_options(params))

    def analysed(self, kind: str, run_id: str = "", params: Json | None = None) -> BaseModel:
        body = analysed_query(self.services.analysed_runs, kind, run_id, params or {})
        return expect(body, ANALYSED_BODIES[kind])


def _step_options(params: Json) -> StepOptions:
    """The query parameters of a run step / metrics request as the service's options."""
    return StepOptions(
        model=params.get("model"),
        ratio=float(params.get("ratio", ANALYSIS_DEFAULTS.ratio)),
        methods=tuple(str(params.get("methods", "entropy,gmts")).split(",")),
        numbers=str(params.get("numbers", "recomputed")),
        budget_over=str(params.get("budget_over", "trained")),
    )
