"""Response model of ``GET /v1/methods``: every selection method with its citation."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class MethodOut(BaseModel):
    name: str = Field(description="The name to pass in selection.methods.")
    description: str = Field(description="One line.")
    citation: str = Field(description="The paper the criterion comes from (arXiv id, title).")
    details: str = Field(description="Formula, constants, and the choices the paper leaves open.")
    kind: Literal["selection", "weighting"] = Field(
        description="'weighting': a per-token weight in its paper, scored here by the weight."
    )
    uses_ratio: bool = Field(description="False: the method keeps every token (plain GRPO).")


class MethodsResponse(BaseModel):
    methods: list[MethodOut]
