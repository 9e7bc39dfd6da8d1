"""Request and response models of ``POST /v1/gradcheck`` ("how good is the proxy?").

The request is an analyze request (``app.schemas.analyze_request.AnalyzeRequest``: single or batch
form, same validation and limits) plus the size of the exact computation; the response is the
analyze response whose tokens also carry ``true_grad_norm`` and ``head_grad_norm``, plus
``fidelity`` (see :mod:`gmts_core.experiments.gradcheck`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.analyze_request import REQUEST_PAIRS, AnalyzeRequest
from app.schemas.analyze_response import AnalyzeResponse, Spearman
from app.schemas.numbers import Num
from app.schemas.request_base import schema_rules
from gmts_core.experiments.gradcheck import DEFAULT_MAX_TOKENS

GRADCHECK_DEFAULT_TOKENS = 256


class GradcheckRequest(AnalyzeRequest):
    """An analyze request, checked against exact per-token gradients of every parameter."""

    max_tokens: int = Field(
        GRADCHECK_DEFAULT_TOKENS,
        ge=1,
        le=DEFAULT_MAX_TOKENS,
        description="Refuse more answer tokens than this (each needs its own backward pass).",
    )
    precision: Literal["float32", "float64"] = Field(
        "float32", description="Precision of the exact gradients (float64: slower, for tests)."
    )

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra=schema_rules(
            REQUEST_PAIRS,
            forms=("prompt", "groups"),
            examples=[
                {
                    "model": "tiny-arith",
                    "prompt": "Q: 47+38=?\nA:",
                    "answers": [" 7+8=15 carry 1, 4+3+1=8, so 85", " 7+8=15, 4+3=7, so 75"],
                    "rewards": [1, 0],
                    "max_tokens": 256,
                }
            ],
        ),
    )


class FidelityOut(BaseModel):
    """How well each method's score tracks the true per-token gradient norms."""

    model_config = ConfigDict(extra="allow")

    precision: str
    num_tokens: int
    num_parameters: int
    tied_embeddings: bool
    full_grad_norm: Num = Field(description="||dL/dtheta|| of the full (all-token) loss.")
    spearman: dict[str, Spearman] = Field(description="Score vs true norm, per method.")
    spearman_head: Spearman = Field(description="Head-only norm (gamma ||h||) vs true norm.")
    true_grad_coverage: dict[str, Num] = Field(description="Share of true norm mass selected.")
    true_grad_sq_coverage: dict[str, Num]
    cosine_to_full: dict[str, Num] = Field(
        description="cos(gradient of the selected tokens' loss, gradient of the full loss)."
    )
    norm_ratio_to_full: dict[str, Num]
    max_abs_logprob_diff: Num
    seconds: Num
    notes: list[str]


class GradcheckResponse(AnalyzeResponse):
    """The analysis (each token also has ``true_grad_norm`` and ``head_grad_norm``) + fidelity."""

    fidelity: FidelityOut
