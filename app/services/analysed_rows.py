"""Analysed-run rows (what a reading process answers) as the response models: NaN as null,
each method's columns gathered into one mapping, and a row the format forbids a 422."""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.schemas.analysed_runs import AnalysedRunInfo
from app.services.run_roots import safe_text
from gmts_core.errors import InvalidInputError

M = TypeVar("M", bound=BaseModel)


def models(model: type[M], rows: list[dict[str, Any]], run_id: str) -> list[M]:
    """``rows`` as ``model``; a row the format forbids (a null where a value must be) is a
    422 naming the field, never a 500."""
    out = []
    for row in rows:
        try:
            out.append(model.model_validate(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ()))
            raise InvalidInputError(
                f"{safe_text(run_id)}: a row of the dataset holds a value its format does not "
                f"allow (field {field!r}: {first.get('msg', 'invalid')})"
            ) from None
    return out


def method_names(rows: list[dict[str, Any]], prefix: str) -> tuple[str, ...]:
    if not rows:
        return ()
    return tuple(k[len(prefix) :] for k in rows[0] if k.startswith(prefix))


def finite(row: dict[str, Any]) -> dict[str, Any]:
    """A row with NaN and infinite floats as None (JSON has no NaN)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def per_method(row: dict[str, Any], prefix: str, methods: tuple[str, ...]) -> dict[str, Any]:
    return {m: row.pop(f"{prefix}{m}") for m in methods if f"{prefix}{m}" in row}


def step_row(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    row = finite(row)
    coverage = per_method(row, "coverage_", methods)
    wasted = per_method(row, "wasted_", methods)
    return {**row, "coverage": coverage, "wasted": wasted}


def answer_row(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    row = finite(row)
    counts = per_method(row, "selected_count_", methods)
    return {**row, "selected_count": counts or None}


def token_row(row: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    row = finite(row)
    selected = per_method(row, "selected_", methods)
    return {**row, "selected": selected}


def run_info(name: str, found: tuple[dict[str, Any], list[dict[str, Any]]]) -> AnalysedRunInfo:
    reply, steps = found
    return AnalysedRunInfo(
        id=safe_text(name),
        version=reply["version"],
        methods=reply["methods"],
        num_steps=len(steps),
        first_step=steps[0]["step"] if steps else None,
        last_step=steps[-1]["step"] if steps else None,
        num_tokens=sum(int(s["num_tokens"]) for s in steps),
        skipped_steps={k: v for k, v in list(reply["skipped"].items())[:20]},
    )
