"""GET /v1/queue: the heavy-job queue, and one request's place in it with an estimated wait.

A client that sends a heavy request with an ``X-Request-ID`` can poll
``GET /v1/queue/{request_id}`` while it waits: its place in the queue and the estimated wait. Every
response of a request that ran a job carries ``X-Queue-Wait-S`` (seconds in the queue) and
``X-Work-S`` (seconds of work).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.api.deps import ServicesDep
from app.api.routes.common import error_responses
from app.schemas.server import JobStatusOut, QueueOut
from app.services.errors import JobNotFoundError

router = APIRouter(prefix="/queue", tags=["queue"])


@router.get(
    "",
    response_model=QueueOut,
    summary="The heavy-job queue: running, waiting, and a new request's place and wait.",
    responses=error_responses(401),
)
def queue(services: ServicesDep) -> QueueOut:
    jobs = services.jobs
    place = jobs.next_place
    return QueueOut(
        running=jobs.running,
        waiting=jobs.waiting,
        max_concurrent=jobs.max_concurrent,
        max_queued=jobs.max_queued,
        mean_job_s=None if jobs.mean_job_s is None else round(jobs.mean_job_s, 3),
        next_place=place,
        estimated_wait_s=jobs.estimate_wait_s(place),
    )


@router.get(
    "/{request_id}",
    response_model=JobStatusOut,
    summary="Where the job of the request with this X-Request-ID is: its place and wait.",
    responses=error_responses(401, 404),
)
def job_status(
    request_id: Annotated[str, Path(min_length=1, max_length=64)], services: ServicesDep
) -> JobStatusOut:
    status = services.jobs.status(request_id)
    if status is None:
        raise JobNotFoundError(
            f"no job of request {request_id!r} is waiting or running (finished, or never sent)"
        )
    return JobStatusOut(
        request_id=status.label,
        state=status.state,
        place=status.place,
        estimated_wait_s=status.estimated_wait_s,
    )
