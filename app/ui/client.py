"""Where the UI gets its analyses: the local service layer, or a remote GMTS server's HTTP API.

Both backends take the JSON body of ``POST /v1/analyze`` and return its JSON response, so the
UI renders the same dict either way; the same holds for ``/v1/gradcheck`` and the live-RL
sessions of ``/v1/sessions`` (create, step, get, evaluate, reset). A compare run
(:mod:`gmts_core.compare`) has no HTTP route, so only the local backend runs one. The remote
mode (``gmts serve --api-url URL`` or ``GMTS_API_URL``) lets a GPU server hold the models while
the UI runs elsewhere.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from app.gradcheck_schemas import GradcheckRequest
from app.schemas import AnalyzeRequest
from app.services.analysis import result_body
from app.services.errors import SessionNotFoundError
from app.session_schemas import SessionCreateRequest, SessionEvalRequest, SessionStepRequest
from gmts_core.errors import GMTSError, InvalidInputError

logger = logging.getLogger(__name__)

Json = dict[str, Any]
REMOTE_TIMEOUT_S = 600.0
CompareProgress = Callable[[int, int, str], None]  # (done, total, label)


class BackendError(GMTSError):
    """The backend refused or failed a request; the message is the server's own."""

    code = "backend_error"


class Backend(Protocol):
    """What the UI needs from a backend."""

    label: str

    def analyze(self, request: Json) -> Json: ...

    def models(self) -> tuple[list[str], str | None]:
        """Model names to offer, and the default one."""
        ...

    def gradcheck(self, request: Json) -> Json:
        """``POST /v1/gradcheck``: the analysis with true per-token gradients and ``fidelity``."""
        ...

    def create_session(self, request: Json) -> Json:
        """``POST /v1/sessions``: a new private session; its settings and (empty) history."""
        ...

    def step_session(self, session_id: str, request: Json) -> Json:
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
        self, model: str | None, config: Any, progress: CompareProgress | None = None
    ) -> Json:
        """``run_compare(model, config).to_dict()``; the local backend only."""
        ...


def validation_message(exc: ValidationError) -> str:
    """A pydantic error as one line per problem: ``field.path: message``."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        lines.append(f"{where}: {msg}" if where else msg)
    return "; ".join(lines)


M = TypeVar("M", bound=BaseModel)


def _validated(schema: type[M], request: Json) -> M:
    """``request`` as ``schema``, a validation error as InvalidInputError naming the fields."""
    try:
        return schema.model_validate(request)
    except ValidationError as exc:
        raise InvalidInputError(validation_message(exc)) from None


class LocalBackend:
    """Calls the in-process service layer (the same code path as the API's route)."""

    label = "local"

    def __init__(self, services: Any) -> None:
        self.services = services

    def analyze(self, request: Json) -> Json:
        req = _validated(AnalyzeRequest, request)
        return result_body(self.services.analysis.analyze_blocking(req))

    def job_load(self) -> tuple[int, int]:
        """(running, waiting) heavy jobs of this server now (for the UI's progress line)."""
        jobs = self.services.jobs
        return int(jobs.running), int(jobs.waiting)

    def models(self) -> tuple[list[str], str | None]:
        names = [m["alias"] for m in self.services.models.list_models()]
        return names, self.services.settings.default_model

    def gradcheck(self, request: Json) -> Json:
        from app.services.gradcheck import GradcheckService

        service = GradcheckService(self.services.analysis)
        return service.run_blocking(_validated(GradcheckRequest, request))

    def create_session(self, request: Json) -> Json:
        req = _validated(SessionCreateRequest, request)
        return self.services.sessions.create_blocking(req).info()  # type: ignore[no-any-return]

    def step_session(self, session_id: str, request: Json) -> Json:
        req = _validated(SessionStepRequest, request)
        return self.services.sessions.step_blocking(session_id, req)  # type: ignore[no-any-return]

    def get_session(self, session_id: str) -> Json:
        return self.services.sessions.info(session_id)  # type: ignore[no-any-return]

    def evaluate_session(self, session_id: str, request: Json) -> Json:
        req = _validated(SessionEvalRequest, request)
        return self.services.sessions.evaluate_blocking(session_id, req)  # type: ignore[no-any-return]

    def reset_session(self, session_id: str) -> Json:
        return self.services.sessions.reset_blocking(session_id)  # type: ignore[no-any-return]

    def compare(
        self, model: str | None, config: Any, progress: CompareProgress | None = None
    ) -> Json:
        """Run a compare in a job slot (it holds the slot for its whole run)."""
        from gmts_core.compare import run_compare

        models = self.services.models
        ref = models.resolve(model)
        models.ensure_available(ref)
        config.validate()
        return self.services.jobs.run_blocking(  # type: ignore[no-any-return]
            lambda: run_compare(models.load(ref), config, progress).to_dict()
        )


class RemoteBackend:
    """Calls another GMTS server's ``/v1`` API over HTTP."""

    def __init__(
        self, base_url: str, api_key: str | None = None, timeout_s: float = REMOTE_TIMEOUT_S
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.label = f"remote {self.base_url}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def _call(self, method: str, path: str, body: Json | None = None) -> Json:
        try:
            resp = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach the GMTS backend at {self.base_url}: {exc}") from None
        if resp.status_code >= 400:
            if resp.status_code == 404 and error_code(resp) == SessionNotFoundError.code:
                raise SessionNotFoundError(error_message(resp))
            raise BackendError(error_message(resp))
        try:
            data = resp.json()
        except ValueError:
            raise BackendError(f"the backend at {self.base_url} did not answer JSON") from None
        return data if isinstance(data, dict) else {"data": data}

    def analyze(self, request: Json) -> Json:
        return self._call("POST", "/v1/analyze", request)

    def models(self) -> tuple[list[str], str | None]:
        try:
            data = self._call("GET", "/v1/models")
        except BackendError as exc:
            logger.warning("cannot list remote models: %s", exc)
            return [], None
        return [m["alias"] for m in data.get("models", [])], data.get("default")

    def gradcheck(self, request: Json) -> Json:
        return self._call("POST", "/v1/gradcheck", request)

    def create_session(self, request: Json) -> Json:
        return self._call("POST", "/v1/sessions", request)

    def step_session(self, session_id: str, request: Json) -> Json:
        return self._call("POST", f"/v1/sessions/{_quoted(session_id)}/step", request)

    def get_session(self, session_id: str) -> Json:
        return self._call("GET", f"/v1/sessions/{_quoted(session_id)}")

    def evaluate_session(self, session_id: str, request: Json) -> Json:
        return self._call("POST", f"/v1/sessions/{_quoted(session_id)}/evaluate", request)

    def reset_session(self, session_id: str) -> Json:
        return self._call("POST", f"/v1/sessions/{_quoted(session_id)}/reset")

    def compare(
        self, model: str | None, config: Any, progress: CompareProgress | None = None
    ) -> Json:
        raise BackendError(
            "a compare run needs the local backend (it has no HTTP route): run "
            "`gmts compare --out DIR` on the server and load DIR/compare.json here"
        )


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


def make_backend(settings: Any, services: Any) -> Backend:
    """The remote backend when ``settings.api_url`` is set, else the local service layer."""
    url = getattr(settings, "api_url", None)
    if url:
        key = getattr(settings, "api_key_value", None)
        return RemoteBackend(url, key)
    return LocalBackend(services)
