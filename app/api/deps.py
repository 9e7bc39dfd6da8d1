"""Request dependencies as ``Annotated`` aliases: the shared services and the API key check."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.errors import UnauthorizedError
from app.core.config import Settings
from app.services.container import Services
from gmts_core.errors import InvalidInputError

_bearer = HTTPBearer(
    auto_error=False,
    description="Set GMTS_API_KEY on the server to require `Authorization: Bearer <key>`.",
)


def get_services(request: Request) -> Services:
    return request.app.state.services


def get_settings(request: Request) -> Settings:
    return get_services(request).settings


ServicesDep = Annotated[Services, Depends(get_services)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def require_api_key(settings: SettingsDep, credentials: BearerDep) -> None:
    """Constant-time check of the bearer key when one is configured (GMTS_API_KEY)."""
    expected = settings.api_key_value
    if expected is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise UnauthorizedError("a valid API key is required: Authorization: Bearer <key>")


def reject_unknown_query(request: Request) -> None:
    """Query parameters the route does not declare are a 422 naming them (as unknown body
    fields are), not silently ignored: a misspelt ``?fromat=csv`` would otherwise be lost; so
    is one given twice (``?format=csv&format=json``: which one was meant?)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    allowed = _query_names(dependant)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        valid = ", ".join(sorted(allowed)) or "none"
        raise InvalidInputError(
            f"unknown query parameter(s): {', '.join(unknown)}; this route takes: {valid}"
        )
    # every query parameter here takes one value: a second one would silently win
    repeated = sorted({k for k in request.query_params if len(request.query_params.getlist(k)) > 1})
    if repeated:
        raise InvalidInputError(
            f"query parameter(s) given more than once: {', '.join(repeated)}; give each once"
        )


def _query_names(dependant: Any) -> set[str]:
    """The query parameters a route declares, its dependencies' included."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
