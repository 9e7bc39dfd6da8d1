"""The services of one app instance, built once and shared by the API routes, the UI and the CLI.

``build_services(settings)`` makes every service (models, jobs, analysis, sessions, gradcheck,
compare); ``create_app`` puts them on ``app.state.services``, the UI's local backend and the CLI
call the same objects. Every front end reaches the library through these services.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.core.config import Settings
from app.services.analysed_runs import AnalysedRunService
from app.services.analysis import AnalysisService
from app.services.compare import CompareService
from app.services.gradcheck import GradcheckService
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from app.services.run_metrics import RunMetrics
from app.services.runs import RunService
from app.services.sessions import SessionService


@dataclass
class Services:
    settings: Settings
    models: ModelRegistry
    jobs: JobLimiter
    analysis: AnalysisService
    sessions: SessionService
    gradcheck: GradcheckService
    compare: CompareService
    runs: RunService
    run_metrics: RunMetrics
    analysed_runs: AnalysedRunService


def build_services(settings: Settings, clock: Callable[[], float] = time.monotonic) -> Services:
    """Every service for ``settings``; ``clock`` drives session expiry (tests inject one)."""
    models = ModelRegistry(settings)
    jobs = JobLimiter(
        settings.max_concurrent_jobs,
        settings.max_queued_jobs,
        settings.retry_after_s,
        max_per_client=settings.max_jobs_per_client,
    )
    sessions = SessionService(settings, models, jobs, clock)
    analysis = AnalysisService(settings, models, jobs, sessions)
    runs = RunService(settings, models, jobs)
    return Services(
        settings,
        models,
        jobs,
        analysis,
        sessions,
        GradcheckService(analysis),
        CompareService(settings, models, jobs),
        runs,
        RunMetrics(runs),
        AnalysedRunService(settings, runs),
    )
