"""The UI's local backend: the in-process service layer, in the server's own job queue (the same
code path as the API's routes; the place in the queue comes from the job queue itself)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from app.schemas.analyze_request import AnalyzeRequest
from app.schemas.gradcheck import GradcheckRequest
from app.schemas.sessions import SessionCreateRequest, SessionEvalRequest, SessionStepRequest
from app.services.analysed_runs import query as analysed_query
from app.services.catalog import ANALYSIS_DEFAULTS, capabilities
from app.services.compare import CompareConfig
from app.services.container import Services
from app.services.jobs import wait_in_queue
from app.services.responses import as_json
from app.services.runs import StepOptions
from app.services.validation import validated
from app.ui.client import DEFAULT_QUEUE_WAIT_S, CompareProgress, Json, T, notify_person
from app.ui.status import LiveStatus


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

    def analyze(self, request: Json, status: LiveStatus | None = None) -> Json:
        req = validated(AnalyzeRequest, request)
        on_stage = status.stage if status is not None else None
        run = self.services.analysis.run
        return as_json(self._job(lambda: run(req, on_stage=on_stage), status))

    def job_load(self) -> tuple[int, int]:
        """(running, waiting) heavy jobs of this server now (for the UI's progress line)."""
        jobs = self.services.jobs
        return int(jobs.running), int(jobs.waiting)

    def models(self) -> tuple[list[str], str | None]:
        names = [m["alias"] for m in self.services.models.list_models()]
        return names, self.services.settings.default_model

    def capabilities(self) -> Json:
        return as_json(capabilities(self.services.settings))

    def gradcheck(self, request: Json) -> Json:
        req = validated(GradcheckRequest, request)
        return as_json(self._job(lambda: self.services.gradcheck.run(req)))

    def create_session(self, request: Json) -> Json:
        req = validated(SessionCreateRequest, request)
        return as_json(self._job(lambda: self.services.sessions.create(req)))

    def step_session(
        self, session_id: str, request: Json, status: LiveStatus | None = None
    ) -> Json:
        req = validated(SessionStepRequest, request)
        on_stage = status.stage if status is not None else None
        step = self.services.sessions.step
        return as_json(self._job(lambda: step(session_id, req, on_stage=on_stage), status))

    def get_session(self, session_id: str) -> Json:
        return as_json(self.services.sessions.info(session_id))

    def evaluate_session(self, session_id: str, request: Json) -> Json:
        req = validated(SessionEvalRequest, request)
        return as_json(self._job(lambda: self.services.sessions.evaluate(session_id, req)))

    def reset_session(self, session_id: str) -> Json:
        return as_json(self._job(lambda: self.services.sessions.reset(session_id)))

    def compare(
        self, model: str | None, config: CompareConfig, progress: CompareProgress | None = None
    ) -> Json:
        """Run a compare in a job slot (it holds the slot for its whole run)."""
        run = self.services.compare.run
        return self._job(lambda: run(model, config, progress)).to_dict()

    def runs(self) -> Json:
        return self.services.runs.list_runs().model_dump()  # type: ignore[no-any-return]

    def run_overview(self, run_id: str) -> Json:
        return self.services.runs.overview(run_id).model_dump()  # type: ignore[no-any-return]

    def run_step(self, run_id: str, step: int, params: Json) -> Json:
        options = _step_options(params)
        view = self._job(lambda: self.services.runs.step_view(run_id, int(step), options))
        return view.model_dump()  # type: ignore[no-any-return]

    def run_metrics(self, run_id: str, params: Json) -> Json:
        metrics = self.services.run_metrics.get(run_id, _step_options(params))
        return metrics.model_dump()  # type: ignore[no-any-return]

    def analysed(self, kind: str, run_id: str = "", params: Json | None = None) -> Json:
        body = analysed_query(self.services.analysed_runs, kind, run_id, params or {})
        return body.model_dump()  # type: ignore[no-any-return]


def _step_options(params: Json) -> StepOptions:
    """The query parameters of a run step / metrics request as the service's options."""
    return StepOptions(
        model=params.get("model"),
        ratio=float(params.get("ratio", ANALYSIS_DEFAULTS.ratio)),
        methods=tuple(str(params.get("methods", "entropy,gmts")).split(",")),
        numbers=str(params.get("numbers", "recomputed")),
        budget_over=str(params.get("budget_over", "trained")),
    )
