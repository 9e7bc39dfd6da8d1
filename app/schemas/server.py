"""Bodies about the server itself: the models it serves, health and readiness, what it offers
(``GET /v1/capabilities``), and the one error body every error response uses."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
)

from app.schemas.methods import MethodOut
from app.schemas.numbers import Num


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
    chat_template: bool = Field(
        False, description="Prompts are wrapped in its chat template unless a request says not."
    )
    install: str | None = Field(
        None,
        description="For a packaged model that is not installed: the command that installs it.",
    )


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
    estimated_wait_s: Num = Field(
        None, description="A new heavy request's estimated wait for a slot (see GET /v1/queue)."
    )


class QueueOut(BaseModel):
    """Body of ``GET /v1/queue``: the heavy-job queue as a new request would join it."""

    running: int
    waiting: int
    max_concurrent: int = Field(description="Jobs run at once (GMTS_MAX_CONCURRENT_JOBS).")
    max_queued: int = Field(description="Jobs that may wait (GMTS_MAX_QUEUED_JOBS).")
    mean_job_s: Num = Field(
        description="Running mean of recent jobs' durations (null before the first)."
    )
    next_place: int = Field(description="The place a request sent now would take (1 = next).")
    estimated_wait_s: Num = Field(
        description="Its estimated wait: place x mean_job_s / max_concurrent (null: no job "
        "has finished yet)."
    )


class JobStatusOut(BaseModel):
    """Body of ``GET /v1/queue/{request_id}``: where a request's heavy job is."""

    request_id: str
    state: Literal["waiting", "running"]
    place: int = Field(description="1 = next; 0 = running.")
    estimated_wait_s: Num


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
