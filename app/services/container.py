"""The services one app instance shares between the API routes, the UI and sessions.

``create_app`` puts a :class:`Services` on ``app.state.services``; the UI and the session
service reach the model registry, the job limiter and the analysis service through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.config import Settings
from app.services.analysis import AnalysisService, PolicyProvider
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from app.services.runs import RunService


@dataclass
class Services:
    settings: Settings
    models: ModelRegistry
    jobs: JobLimiter
    analysis: AnalysisService
    runs: RunService
    sessions: Any = None  # the session service, once registered (a PolicyProvider)

    def register_sessions(self, provider: PolicyProvider) -> None:
        """Let ``session_id`` in analyze requests use ``provider``'s session policies."""
        self.sessions = provider
        self.analysis.sessions = provider


def build_services(settings: Settings) -> Services:
    models = ModelRegistry(settings)
    jobs = JobLimiter(
        settings.max_concurrent_jobs, settings.max_queued_jobs, settings.retry_after_s
    )
    analysis = AnalysisService(settings, models, jobs)
    return Services(settings, models, jobs, analysis, RunService(settings, models, jobs))
