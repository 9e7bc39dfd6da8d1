"""Where the UI gets its analyses: the local service layer, or a remote GMTS server's HTTP API.

Both backends take the JSON body of ``POST /v1/analyze`` and return its JSON response, so the
UI renders the same dict either way. The remote mode (``gmts serve --api-url URL`` or
``GMTS_API_URL``) lets a GPU server hold the models while the UI runs elsewhere.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import httpx
from pydantic import ValidationError

from app.schemas import AnalyzeRequest
from app.services.analysis import result_body
from gmts_core.errors import GMTSError, InvalidInputError

logger = logging.getLogger(__name__)

Json = dict[str, Any]
REMOTE_TIMEOUT_S = 600.0


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


def validation_message(exc: ValidationError) -> str:
    """A pydantic error as one line per problem: ``field.path: message``."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        lines.append(f"{where}: {msg}" if where else msg)
    return "; ".join(lines)


class LocalBackend:
    """Calls the in-process service layer (the same code path as the API's route)."""

    label = "local"

    def __init__(self, services: Any) -> None:
        self.services = services

    def analyze(self, request: Json) -> Json:
        try:
            req = AnalyzeRequest.model_validate(request)
        except ValidationError as exc:
            raise InvalidInputError(validation_message(exc)) from None
        return result_body(self.services.analysis.analyze_blocking(req))

    def models(self) -> tuple[list[str], str | None]:
        names = [m["alias"] for m in self.services.models.list_models()]
        return names, self.services.settings.default_model


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
