"""The UI's remote backend: a GMTS server's HTTP API (``gmts serve --api-url URL`` or
``GMTS_API_URL``), so a GPU server can hold the models while the UI runs elsewhere. It sends its
own ``X-Request-ID`` and polls ``GET /v1/queue/{request_id}`` for the place in the queue while a
request is outstanding; a 429 is waited out (up to ``GMTS_UI_QUEUE_WAIT_S``), never shown. Every
body it receives is validated into the route's response model, so the UI reads the same typed
fields as from the local backend, and a body that does not fit is a :class:`BackendError`."""

from __future__ import annotations

import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable

import httpx
from pydantic import BaseModel, ValidationError

from app.schemas.analyze_response import AnalyzeResponse
from app.schemas.gradcheck import GradcheckResponse
from app.schemas.runs import RunMetricsResponse, RunOverviewResponse, RunsResponse, RunStepResponse
from app.schemas.server import CapabilitiesResponse, ModelsResponse
from app.schemas.sessions import EvaluationOut, SessionOut, StepOut
from app.services.compare import CompareResult
from app.services.errors import SessionNotFoundError
from app.ui.client import (
    ANALYSED_BODIES,
    DEFAULT_QUEUE_WAIT_S,
    BackendError,
    CompareProgress,
    Json,
    M,
    notify_person,
)
from app.ui.queue_watch import QueueWatch
from app.ui.status import LiveStatus
from gmts_core.compare_config import CompareConfig

logger = logging.getLogger(__name__)

REMOTE_TIMEOUT_S = 600.0

QUEUE_POLL_S = 0.5  # how often the remote backend asks the server for its place in the queue


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


class RemoteBackend:
    """Calls another GMTS server's ``/v1`` API over HTTP."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = REMOTE_TIMEOUT_S,
        wait_s: float = DEFAULT_QUEUE_WAIT_S,
        on_wait: Callable[[str], None] = notify_person,
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
        """One call; a 429 (server busy) waits ``Retry-After`` and tries again, in the queue,
        up to ``wait_s`` in all (notifying the person once), instead of failing.
        ``request_id`` is sent as ``X-Request-ID`` (the label of the server's job)."""
        waited, notified = 0.0, False
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
            if not notified:
                self.on_wait(
                    "The server is busy: your request waits in the queue and runs as soon as a "
                    "place frees up."
                )
                notified = True
            try:
                pause = min(max(float(resp.headers.get("Retry-After", "1")), 0.2), 10.0)
            except ValueError:
                pause = 1.0
            self._sleep(pause)
            waited += pause

    def _call(
        self, method: str, path: str, body: Json | None = None, status: LiveStatus | None = None
    ) -> Json:
        """The call's JSON body; with ``status``, its place in the queue is notified while it waits
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

    def _model(
        self,
        model: type[M],
        method: str,
        path: str,
        body: Json | None = None,
        status: LiveStatus | None = None,
    ) -> M:
        """The call's body validated into ``model``, the route's response model."""
        data = self._call(method, path, body, status)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise BackendError(
                f"the backend at {self.base_url} answered {method} {path.partition('?')[0]} "
                f"with a body that does not fit {model.__name__}: {exc.error_count()} "
                f"field(s) differ ({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']})"
            ) from None

    def analyze(self, request: Json, status: LiveStatus | None = None) -> AnalyzeResponse:
        # the place in the queue is polled while it waits; the HTTP API has no stages to pass on
        return self._model(AnalyzeResponse, "POST", "/v1/analyze", request, status)

    def models(self) -> tuple[list[str], str | None]:
        try:
            data = self._model(ModelsResponse, "GET", "/v1/models")
        except BackendError as exc:
            logger.warning("cannot list remote models: %s", exc)
            return [], None
        return [m.alias for m in data.models], data.default

    def capabilities(self) -> CapabilitiesResponse:
        return self._model(CapabilitiesResponse, "GET", "/v1/capabilities")

    def gradcheck(self, request: Json) -> GradcheckResponse:
        return self._model(GradcheckResponse, "POST", "/v1/gradcheck", request)

    def create_session(self, request: Json) -> SessionOut:
        return self._model(SessionOut, "POST", "/v1/sessions", request)

    def step_session(
        self, session_id: str, request: Json, status: LiveStatus | None = None
    ) -> StepOut:
        path = f"/v1/sessions/{_quoted(session_id)}/step"
        return self._model(StepOut, "POST", path, request, status)

    def get_session(self, session_id: str) -> SessionOut:
        return self._model(SessionOut, "GET", f"/v1/sessions/{_quoted(session_id)}")

    def evaluate_session(self, session_id: str, request: Json) -> EvaluationOut:
        path = f"/v1/sessions/{_quoted(session_id)}/evaluate"
        return self._model(EvaluationOut, "POST", path, request)

    def reset_session(self, session_id: str) -> SessionOut:
        return self._model(SessionOut, "POST", f"/v1/sessions/{_quoted(session_id)}/reset")

    def compare(
        self, model: str | None, config: CompareConfig, progress: CompareProgress | None = None
    ) -> CompareResult:
        raise BackendError(
            "a compare run needs the local backend (it has no HTTP route): run "
            "`gmts compare --out DIR` on the server and load DIR/compare.json here"
        )

    def runs(self) -> RunsResponse:
        return self._model(RunsResponse, "GET", "/v1/runs")

    def run_overview(self, run_id: str) -> RunOverviewResponse:
        return self._model(RunOverviewResponse, "GET", f"/v1/runs/{_quoted(run_id)}")

    def run_step(self, run_id: str, step: int, params: Json) -> RunStepResponse:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        path = f"/v1/runs/{_quoted(run_id)}/steps/{int(step)}?{query}"
        return self._model(RunStepResponse, "GET", path)

    def run_metrics(self, run_id: str, params: Json) -> RunMetricsResponse:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        return self._model(RunMetricsResponse, "GET", f"/v1/runs/{_quoted(run_id)}/metrics?{query}")

    def analysed(self, kind: str, run_id: str = "", params: Json | None = None) -> BaseModel:
        p = dict(params or {})
        base = f"/v1/analysed-runs/{_quoted(run_id)}"
        paths = {
            "list": lambda: "/v1/analysed-runs",
            "run": lambda: base,
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
        return self._model(ANALYSED_BODIES[kind], "GET", f"{path}?{query}" if query else path)
