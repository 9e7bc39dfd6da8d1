"""The gradcheck service: exact per-token gradients of an analyze request, within the limits.

It follows the analysis service: the cheap checks of :meth:`AnalysisService.prepare` first
(limits, model name, session), then the heavy part in a worker thread under the same job
limiter. Exact gradients keep one running gradient sum per method (7 copies of the parameters
in float64), so models above ``gradcheck_max_parameters`` are refused up front.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from app.gradcheck_schemas import GradcheckRequest
from app.services.analysis import (
    AnalysisService,
    PreparedAnalysis,
    analysis_config,
    check_token_limits,
    result_notes,
)
from app.services.errors import LimitExceededError
from gmts_core.gradcheck import DEFAULT_MAX_TOKENS, GradcheckResult, gradcheck
from gmts_core.modeling import LoadedModel

__all__ = ["DEFAULT_MAX_TOKENS", "GradcheckService", "gradcheck_body"]


def _finite(value: Any) -> Any:
    """JSON cannot carry NaN or infinity: such numbers become null (recursively)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def gradcheck_body(result: GradcheckResult) -> dict[str, Any]:
    """The JSON body of ``POST /v1/gradcheck``: ``result.to_dict()`` plus human ``notes``."""
    body = result.to_dict()
    body["fidelity"] = _finite(body["fidelity"])
    body["notes"] = result_notes(result.analysis)
    return body


class GradcheckService:
    """Runs gradchecks for the API and the UI with the analysis service's limits."""

    def __init__(self, analysis: AnalysisService) -> None:
        self.analysis = analysis
        settings = analysis.settings
        self.max_parameters = settings.gradcheck_max_parameters

    async def run(self, req: GradcheckRequest) -> dict[str, Any]:
        prepared = self.analysis.prepare(req)
        return await self.analysis.jobs.run(lambda: self.execute(prepared, req))

    def run_blocking(self, req: GradcheckRequest) -> dict[str, Any]:
        prepared = self.analysis.prepare(req)
        return self.analysis.jobs.run_blocking(lambda: self.execute(prepared, req))

    def run_local(self, req: GradcheckRequest, lm: LoadedModel) -> dict[str, Any]:
        """A model the caller loaded (the CLI): no server limits, no job queue; the same body."""
        groups = [self.analysis.group_input(g, req.temperature) for g in req.group_requests()]
        config = analysis_config(req)
        return gradcheck_body(gradcheck(lm, groups, config, req.max_tokens, req.precision))

    def execute(self, prepared: PreparedAnalysis, req: GradcheckRequest) -> dict[str, Any]:
        """The heavy part (blocking): the model, its size check, analysis and exact gradients."""
        with self._model(prepared) as lm:
            check_token_limits(self.analysis.settings, lm, prepared)
            self._check_size(lm)
            result = gradcheck(lm, prepared.groups, prepared.config, req.max_tokens, req.precision)
        return gradcheck_body(result)

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
