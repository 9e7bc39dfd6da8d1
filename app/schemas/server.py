"""Bodies about the server itself: the models it serves, health and readiness, what it offers
(``GET /v1/capabilities``), and the one error body every error response uses."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
)

from app.schemas.methods import MethodOut


class ModelInfo(BaseModel):
    alias: str
    source: str
    kind: Literal["alias", "folder", "hub"]
    default: bool
    loaded: bool
    available: bool
    parameters: int | None
    vocab_size: int | None
    device: str | None
    dtype: str | None
    architecture: str | None


class ModelsResponse(BaseModel):
    default: str
    models: list[ModelInfo]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    default_model: str
    loaded: bool
    loadable: bool
    message: str | None = None
    jobs_running: int
    jobs_waiting: int


class ErrorDetail(BaseModel):
    code: str = Field(examples=["validation_error"])
    message: str = Field(examples=["body.selection.ratio: Input should be less than or equal to 1"])
    details: list[dict[str, Any]] | None = None
    request_id: str | None = Field(
        None, description="On a 500: the request's id, also in the X-Request-ID header."
    )


class ErrorBody(BaseModel):
    """Every error response: ``{"error": {"code": ..., "message": ...}}``."""

    error: ErrorDetail


class CapabilitiesResponse(BaseModel):
    """Body of ``GET /v1/capabilities``: what this server offers, so a remote UI lists the
    server's own methods, reward rules and limits rather than its local ones."""

    methods: list[MethodOut]
    default_methods: list[str]
    reward_rules: list[str]
    advantages: list[str]
    loss_aggregations: list[str]
    scopes: list[str]
    limits: dict[str, int] = Field(description="This server's GMTS_* request limits, by name.")
