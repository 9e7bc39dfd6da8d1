"""Where the UI gets its analyses: the local service layer, or a remote GMTS server's HTTP API.

Both backends take the JSON body of ``POST /v1/analyze`` and return its JSON response, so the
UI renders the same dict either way; the same holds for ``/v1/gradcheck`` and the live-RL
sessions of ``/v1/sessions`` (create, step, get, evaluate, reset), and for what the server
offers (``GET /v1/capabilities``: its methods, reward rules and limits, which the UI's
dropdowns list). A compare run has no HTTP route, so only the local backend runs one. The remote
mode (``gmts serve --api-url URL`` or ``GMTS_API_URL``) lets a GPU server hold the models while
the UI runs elsewhere.

A busy server never shows a person a 429: both backends wait in line (up to
``GMTS_UI_QUEUE_WAIT_S``) and say so once with a notice, instead of failing. Both also tell a
waiting Analyze or training step its place in line and estimated wait as it changes: the local
backend from the job line itself, the remote one by sending its own ``X-Request-ID`` and
polling ``GET /v1/queue/{request_id}`` while the request is outstanding.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import gradio as gr
import httpx

from app.schemas.analyze_request import AnalyzeRequest
from app.schemas.gradcheck import GradcheckRequest
from app.schemas.sessions import SessionCreateRequest, SessionEvalRequest, SessionStepRequest
from app.services.analysed_runs import query as analysed_query
from app.services.catalog import ANALYSIS_DEFAULTS, capabilities
from app.services.compare import CompareConfig
from app.services.container import Services
from app.services.errors import GMTSError, SessionNotFoundError
from app.services.jobs import wait_in_line
from app.services.responses import as_json
from app.services.runs import StepOptions
from app.services.validation import validated, validation_message
from app.ui.queue_watch import QueueWatch
from app.ui.status import LiveStatus

logger = logging.getLogger(__name__)

Json = dict[str, Any]
T = TypeVar("T")
REMOTE_TIMEOUT_S = 600.0
QUEUE_POLL_S = 0.5  # how often the remote backend asks the server for its place in line
CompareProgress = Callable[[int, int, str], None]  # (done, total, label)


class BackendError(GMTSError):
    """The backend refused or failed a request; the message is the server's own."""

    code = "backend_error"


class Backend(Protocol):
    """What the UI needs from a backend."""

    label: str

    def analyze(self, request: Json, status: LiveStatus | None = None) -> Json:
        """``POST /v1/analyze``; ``status`` hears the place in line and the stages (local)."""
        ...

    def models(self) -> tuple[list[str], str | None]:
        """Model names to offer, and the default one."""
        ...

    def capabilities(self) -> Json:
        """``GET /v1/capabilities``: the methods, reward rules and limits of the serving process."""
        ...

    def gradcheck(self, request: Json) -> Json:
        """``POST /v1/gradcheck``: the analysis with true per-token gradients and ``fidelity``."""
        ...

    def create_session(self, request: Json) -> Json:
        """``POST /v1/sessions``: a new private session; its settings and (empty) history."""
        ...

    def step_session(
        self, session_id: str, request: Json, status: LiveStatus | None = None
    ) -> Json:
        """``POST /v1/sessions/{id}/step``: metrics of the steps run, and the last batch."""
        ...

    def get_session(self, session_id: str) -> Json:
        """``GET /v1/sessions/{id}``: settings, step history and evaluations."""
        ...

    def evaluate_session(self, session_id: str, request: Json) -> Json:
        """``POST /v1/sessions/{id}/evaluate``: held-out accuracy now (kept in the history)."""
        ...

    def reset_session(self, session_id: str) -> Json:
        """``POST /v1/sessions/{id}/reset``: back to the starting weights, empty history."""
        ...

    def compare(
        self, model: str | None, config: CompareConfig, progress: CompareProgress | None = None
    ) -> Json:
        """A compare run's ``CompareResult.to_dict()``; the local backend only."""
        ...

    def runs(self) -> Json:
        """``GET /v1/runs``: the training runs under the server's run roots."""
        ...

    def run_overview(self, run_id: str) -> Json:
        """``GET /v1/runs/{id}``: the run's steps and per-step numbers."""
        ...

    def run_step(self, run_id: str, step: int, params: Json) -> Json:
        """``GET /v1/runs/{id}/steps/{n}``: one step's groups (logged or analysed)."""
        ...

    def run_metrics(self, run_id: str, params: Json) -> Json:
        """``GET /v1/runs/{id}/metrics``: the rows over steps computed so far (and progress)."""
        ...

    def analysed(self, kind: str, run_id: str = "", params: Json | None = None) -> Json:
        """``GET /v1/analysed-runs...``: one query of an analysed run by name (``kind`` as in
        ``app.services.analysed_runs.QUERIES``: list, steps, groups, answers, tokens,
        rank_answers, rank_tokens)."""
        ...


DEFAULT_QUEUE_WAIT_S = 900.0


def tell_person(message: str) -> None:
    """A notice in the UI (a Gradio toast) when called from an event, else a log line."""
    logger.info(message)
    try:
        gr.Info(message)
    except Exception:  # outside a Gradio event there is nobody to tell
        pass


__all__ = ["Backend", "BackendError", "LocalBackend", "RemoteBackend", "validation_message"]


class LocalBackend:
    """Calls the in-process service layer (the same code path as the API's route)."""

    label = "local"

    def __init__(self, services: Services, on_wait: Callable[[str], None] = tell_person) -> None:
        self.services = services
        settings = getattr(services, "settings", None)
        self.wait_s = float(getattr(settings, "ui_queue_wait_s", DEFAULT_QUEUE_WAIT_S))
        self.on_wait = on_wait

    def _in_line(self, status: LiveStatus | None = None) -> AbstractContextManager[None]:
        on_position = None
        if status is not None:
            jobs = self.services.jobs

            def on_position(place: int) -> None:  # the place and the line's estimate for it
                status.position(place, jobs.estimate_wait_s(place))

        return wait_in_line(self.wait_s, self.on_wait, on_position)

    def _job(self, work: Callable[[], T], status: LiveStatus | None = None) -> T:
        """``work()`` (a service core) in the job line, waiting in line as a person does."""
        with self._in_line(status):
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
    )


class RemoteBackend:
    """Calls another GMTS server's ``/v1`` API over HTTP."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = REMOTE_TIMEOUT_S,
        wait_s: float = DEFAULT_QUEUE_WAIT_S,
        on_wait: Callable[[str], None] = tell_person,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = QUEUE_POLL_S,
    ) -> None:
        self.wait_s, self.on_wait, self._sleep = wait_s, on_wait, sleep
        self.poll_s = min(max(float(poll_s), 0.05), 5.0)
        self.base_url = base_url.rstrip("/")
        self.label = f"remote {self.base_url}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def _request(
        self, method: str, path: str, body: Json | None, request_id: str | None = None
    ) -> httpx.Response:
        """One call; a 429 (server busy) waits ``Retry-After`` and tries again, in line,
        up to ``wait_s`` in all (telling the person once), instead of failing.
        ``request_id`` is sent as ``X-Request-ID`` (the label of the server's job)."""
        waited, told = 0.0, False
        headers = {"X-Request-ID": request_id} if request_id else None
        while True:
            try:
                resp = self._client.request(method, path, json=body, headers=headers)
            except httpx.HTTPError as exc:
                raise BackendError(
                    f"cannot reach the GMTS backend at {self.base_url}: {exc}"
                ) from None
            busy = resp.status_code == 429 and error_code(resp) == "queue_full"
            if not busy or waited >= self.wait_s:
                return resp
            if not told:
                self.on_wait(
                    "The server is busy: your request waits in line and runs as soon as a "
                    "place frees up."
                )
                told = True
            try:
                pause = min(max(float(resp.headers.get("Retry-After", "1")), 0.2), 10.0)
            except ValueError:
                pause = 1.0
            self._sleep(pause)
            waited += pause

    def _call(
        self, method: str, path: str, body: Json | None = None, status: LiveStatus | None = None
    ) -> Json:
        """The call's JSON body; with ``status``, its place in line is told while it waits
        (the request carries its own id, polled at ``GET /v1/queue/{id}``)."""
        if status is None:
            resp = self._request(method, path, body)
        else:
            request_id = f"ui-{uuid.uuid4().hex}"
            watch = f"/v1/queue/{_quoted(request_id)}"
            with QueueWatch(self._client, watch, status, self.poll_s):
                resp = self._request(method, path, body, request_id)
        if resp.status_code >= 400:
            if resp.status_code == 404 and error_code(resp) == SessionNotFoundError.code:
                raise SessionNotFoundError(error_message(resp))
            raise BackendError(error_message(resp))
        try:
            data = resp.json()
        except ValueError:
            raise BackendError(f"the backend at {self.base_url} did not answer JSON") from None
        return data if isinstance(data, dict) else {"data": data}

    def analyze(self, request: Json, status: LiveStatus | None = None) -> Json:
        # the place in line is polled while it waits; the HTTP API has no stages to pass on
        return self._call("POST", "/v1/analyze", request, status)

    def models(self) -> tuple[list[str], str | None]:
        try:
            data = self._call("GET", "/v1/models")
        except BackendError as exc:
            logger.warning("cannot list remote models: %s", exc)
            return [], None
        return [m["alias"] for m in data.get("models", [])], data.get("default")

    def capabilities(self) -> Json:
        return self._call("GET", "/v1/capabilities")

    def gradcheck(self, request: Json) -> Json:
        return self._call("POST", "/v1/gradcheck", request)

    def create_session(self, request: Json) -> Json:
        return self._call("POST", "/v1/sessions", request)

    def step_session(
        self, session_id: str, request: Json, status: LiveStatus | None = None
    ) -> Json:
        return self._call("POST", f"/v1/sessions/{_quoted(session_id)}/step", request, status)

    def get_session(self, session_id: str) -> Json:
        return self._call("GET", f"/v1/sessions/{_quoted(session_id)}")

    def evaluate_session(self, session_id: str, request: Json) -> Json:
        return self._call("POST", f"/v1/sessions/{_quoted(session_id)}/evaluate", request)

    def reset_session(self, session_id: str) -> Json:
        return self._call("POST", f"/v1/sessions/{_quoted(session_id)}/reset")

    def compare(
        self, model: str | None, config: CompareConfig, progress: CompareProgress | None = None
    ) -> Json:
        raise BackendError(
            "a compare run needs the local backend (it has no HTTP route): run "
            "`gmts compare --out DIR` on the server and load DIR/compare.json here"
        )

    def runs(self) -> Json:
        return self._call("GET", "/v1/runs")

    def run_overview(self, run_id: str) -> Json:
        return self._call("GET", f"/v1/runs/{_quoted(run_id)}")

    def run_step(self, run_id: str, step: int, params: Json) -> Json:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        return self._call("GET", f"/v1/runs/{_quoted(run_id)}/steps/{int(step)}?{query}")

    def run_metrics(self, run_id: str, params: Json) -> Json:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        return self._call("GET", f"/v1/runs/{_quoted(run_id)}/metrics?{query}")

    def analysed(self, kind: str, run_id: str = "", params: Json | None = None) -> Json:
        p = dict(params or {})
        base = f"/v1/analysed-runs/{_quoted(run_id)}"
        paths = {
            "list": lambda: "/v1/analysed-runs",
            "steps": lambda: f"{base}/steps",
            "groups": lambda: f"{base}/steps/{int(p.pop('step'))}/groups",
            "answers": lambda: (
                f"{base}/steps/{int(p.pop('step'))}/groups/{int(p.pop('group'))}/answers"
            ),
            "tokens": lambda: (
                f"{base}/steps/{int(p.pop('step'))}/groups/{int(p.pop('group'))}"
                f"/answers/{int(p.pop('answer'))}/tokens"
            ),
            "rank_answers": lambda: f"{base}/answers",
            "rank_tokens": lambda: f"{base}/tokens",
        }
        path = paths[kind]()
        query = urllib.parse.urlencode(
            {k: str(v).lower() if isinstance(v, bool) else v for k, v in p.items() if v is not None}
        )
        return self._call("GET", f"{path}?{query}" if query else path)


def _quoted(session_id: str) -> str:
    return urllib.parse.quote(session_id, safe="")


def error_code(resp: httpx.Response) -> str | None:
    """The ``{"error": {"code": ...}}`` of an API error response, if any."""
    try:
        code = resp.json().get("error", {}).get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, str) else None


def error_message(resp: httpx.Response) -> str:
    """The ``{"error": {"message": ...}}`` of an API error response, or its status line."""
    try:
        err = resp.json().get("error", {})
        message = err.get("message")
    except (ValueError, AttributeError):
        message = None
    return message or f"the backend answered HTTP {resp.status_code}"


def make_backend(settings: Any, services: Services) -> Backend:
    """The remote backend when ``settings.api_url`` is set, else the local service layer."""
    url = getattr(settings, "api_url", None)
    if url:
        key = getattr(settings, "api_key_value", None)
        wait_s = float(getattr(settings, "ui_queue_wait_s", DEFAULT_QUEUE_WAIT_S))
        return RemoteBackend(url, key, wait_s=wait_s)
    return LocalBackend(services)
