"""The gradcheck service: exact per-token gradients of an analyze request, within the limits.

It follows the analysis service: the cheap checks of :meth:`AnalysisService.prepare` first
(limits, model name, session), then the heavy part in a worker thread under the same job
limiter. Exact gradients keep one running gradient sum per method (7 copies of the parameters
in float64), so models above ``gradcheck_max_parameters`` are refused up front.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from app.schemas.gradcheck import GradcheckRequest, GradcheckResponse
from app.services.analysis import AnalysisService, PreparedAnalysis
from app.services.policy import LimitsPolicy
from app.services.responses import gradcheck_response
from gmts_core.analysis.analyze import TokenLimit
from gmts_core.errors import LimitExceededError
from gmts_core.experiments.gradcheck import DEFAULT_MAX_TOKENS, gradcheck
from gmts_core.model.loading import LoadedModel
from gmts_core.progress import StageCallback

__all__ = ["DEFAULT_MAX_TOKENS", "GradcheckService"]


class GradcheckService:
    """The gradcheck core (:meth:`run`) for the API, the UI and the CLI, under a limits policy
    (the analysis service's checks, then the model size)."""

    def __init__(self, analysis: AnalysisService) -> None:
        self.analysis = analysis
        self.max_parameters = analysis.settings.gradcheck_max_parameters

    def run(
        self,
        req: GradcheckRequest,
        limits: LimitsPolicy | None = None,
        on_stage: StageCallback | None = None,
    ) -> GradcheckResponse:
        """Validate, apply ``limits`` (the server's by default), run, return the body
        (blocking: callers on an event loop use :meth:`queued`); ``on_stage(name, done, total)``
        hears each stage as it begins (the CLI prints it)."""
        limits = limits or self.analysis.limits
        prepared = self.analysis.prepare(req, limits)
        with self._model(prepared) as lm:
            if not limits.any_model_source:  # the server's size limit; the CLI's user decides
                self._check_size(lm)
            token_limit = TokenLimit(limits.max_total_tokens, "GMTS_MAX_TOTAL_TOKENS")
            result = gradcheck(
                lm, prepared.groups, prepared.config, req.max_tokens, req.precision,
                on_stage=on_stage, token_limit=token_limit,
            )  # fmt: skip
        return gradcheck_response(result)

    async def queued(self, req: GradcheckRequest) -> GradcheckResponse:
        """:meth:`run` in the job queue, for the HTTP route (failed checks answer at once)."""
        self.analysis.prepare(req, self.analysis.limits)
        return await self.analysis.jobs.run(lambda: self.run(req))

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
