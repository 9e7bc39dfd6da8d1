"""Each setting is documented once, on the library's config dataclass: the API schema, the CLI
options and the UI controls show its help and bounds; response models take the library
results' field lists."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner

import app.cli.analyze  # noqa: F401  (registers the command)
from app.cli._app import cli
from app.schemas.runs import StepReportOut
from app.schemas.sessions import AnswerChangeOut, StepMetricsOut, TokenChangeOut
from gmts_core.bounds import MIN_RATIO
from gmts_core.config import AnalysisConfig
from gmts_core.grpo.records import AnswerChange, StepMetrics, TokenChange
from gmts_core.knobs import knob_info
from gmts_core.runs.analysis import StepReport

BOUND_KEYS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}


def _schema_bounds(prop: dict[str, Any]) -> dict[str, float]:
    return {k: prop[v] for k, v in BOUND_KEYS.items() if v in prop}


def test_analyze_request_schema_takes_help_and_bounds_from_the_knobs(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    request, selection = schemas["AnalyzeRequest"]["properties"], schemas["SelectionOptions"]
    for name, prop in [
        ("temperature", request["temperature"]),
        ("top_alternatives", request["top_alternatives"]),
        ("loss_aggregation", request["loss_aggregation"]),
        ("ratio", selection["properties"]["ratio"]),
    ]:
        help_text, bounds = knob_info(AnalysisConfig, name)
        assert prop["description"] == help_text, name
        assert _schema_bounds(prop) == bounds, name
        assert prop["default"] == getattr(AnalysisConfig(), name), name
    assert knob_info(AnalysisConfig, "ratio")[1] == {"ge": MIN_RATIO, "le": 1}
    scope_help = knob_info(AnalysisConfig, "scope")[0]
    assert selection["properties"]["scope"]["description"].startswith(scope_help + " Default:")


def test_every_analysis_setting_is_a_documented_knob() -> None:
    for f in dataclasses.fields(AnalysisConfig):
        help_text, _ = knob_info(AnalysisConfig, f.name)
        assert help_text.strip(), f.name


def test_cli_help_shows_the_knobs_help_and_range() -> None:
    result = CliRunner().invoke(cli, ["analyze", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())
    for name in ("temperature", "top_alternatives", "ratio"):
        help_text, bounds = knob_info(AnalysisConfig, name)
        assert help_text in text, name
        low, high = bounds.get("ge", bounds.get("gt")), bounds["le"]
        assert f"{low:g}<=x<={high:g}" in text, name
    args = ["analyze", "--prompt", "p", "--top-alternatives", "101"]
    bad = CliRunner().invoke(cli, args, env={"COLUMNS": "400"})
    assert bad.exit_code == 2 and "less than or equal to 100" in bad.output  # the knob range


def test_explore_sliders_show_the_knobs_help_within_its_bounds() -> None:
    from app.ui.tabs.explore.controls import knob_slider

    ratio = knob_slider("ratio", 0.05, 5.0, step=0.05, label="Selection ratio")
    assert ratio.info == knob_info(AnalysisConfig, "ratio")[0]
    assert (ratio.minimum, ratio.maximum, ratio.value) == (0.05, 1, AnalysisConfig().ratio)


def test_response_models_take_the_result_dataclasses_field_lists() -> None:
    for model, source, added in [
        (StepMetricsOut, StepMetrics, []),
        (TokenChangeOut, TokenChange, ["logprob_change"]),
        (AnswerChangeOut, AnswerChange, []),
        (StepReportOut, StepReport, []),
    ]:
        names = [f.name for f in dataclasses.fields(source)]
        assert list(model.model_fields) == names + added, model.__name__
    change = AnswerChange(0, 1, "p", "a", 1.0, math.nan, [TokenChange(0, 5, "x", True, -1.0, -0.5)])
    body = AnswerChangeOut.model_validate(change).model_dump(mode="json")
    assert body["advantage"] is None  # NaN has no JSON form
    assert body["tokens"][0]["logprob_change"] == 0.5
