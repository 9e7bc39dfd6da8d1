"""The gradcheck service: exact per-token gradients of an analyze request, within the limits.

It follows the analysis service: the cheap checks of :meth:`AnalysisService.prepare` first
(limits, model name, session), then the heavy part in a worker thread under the same job
limiter. Exact gradients keep one running gradient sum per method (7 copies of the parameters
in float64), so models above ``gradcheck_max_parameters`` are refused up front.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from app.schemas.gradcheck import GradcheckRequest, GradcheckResponse
from app.services.analysis import (
    AnalysisService,
    PreparedAnalysis,
    analysis_config,
    check_token_limits,
)
from app.services.bodies import gradcheck_response
from app.services.errors import LimitExceededError
from gmts_core.experiments.gradcheck import DEFAULT_MAX_TOKENS, gradcheck
from gmts_core.modeling import LoadedModel

__all__ = ["DEFAULT_MAX_TOKENS", "GradcheckService"]


class GradcheckService:
    """Runs gradchecks for the API and the UI with the analysis service's limits."""

    def __init__(self, analysis: AnalysisService) -> None:
        self.analysis = analysis
        settings = analysis.settings
        self.max_parameters = settings.gradcheck_max_parameters

    async def run(self, req: GradcheckRequest) -> GradcheckResponse:
        prepared = self.analysis.prepare(req)
        return await self.analysis.jobs.run(lambda: self.execute(prepared, req))

    def run_blocking(self, req: GradcheckRequest) -> GradcheckResponse:
        prepared = self.analysis.prepare(req)
        return self.analysis.jobs.run_blocking(lambda: self.execute(prepared, req))

    def run_local(self, req: GradcheckRequest, lm: LoadedModel) -> GradcheckResponse:
        """A model the caller loaded (the CLI): no server limits, no job queue; the same body."""
        groups = [self.analysis.group_input(g, req.temperature) for g in req.group_requests()]
        config = analysis_config(req)
        return gradcheck_response(gradcheck(lm, groups, config, req.max_tokens, req.precision))

    def execute(self, prepared: PreparedAnalysis, req: GradcheckRequest) -> GradcheckResponse:
        """The heavy part (blocking): the model, its size check, analysis and exact gradients."""
        with self._model(prepared) as lm:
            check_token_limits(self.analysis.settings, lm, prepared)
            self._check_size(lm)
            result = gradcheck(lm, prepared.groups, prepared.config, req.max_tokens, req.precision)
        return gradcheck_response(result)

    def _model(self, prepared: PreparedAnalysis) -> AbstractContextManager[LoadedModel]:
        if prepared.ref is None:  # a session's policy, held while in use
            assert self.analysis.sessions is not None and prepared.session_id is not None
            return self.analysis.sessions.use_policy(prepared.session_id)
        return nullcontext(self.analysis.models.load(prepared.ref))

    def _check_size(self, lm: LoadedModel) -> None:
        n = sum(p.numel() for p in lm.model.parameters())
        if n > self.max_parameters:
            raise LimitExceededError(
                f"{lm.name} has {n:,} parameters; exact per-token gradients are limited to "
                f"{self.max_parameters:,} on this server (small models only)"
            )
