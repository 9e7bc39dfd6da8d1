"""Fixtures of the UI tests: an analysis body of two small groups on the tiny test model."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.responses import analysis_json
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, RewardSpec, analyze
from gmts_core.model.loading import load_model
from tests.app.api_helpers import TINY


@pytest.fixture(scope="module")
def result(model_root: Path) -> dict:
    """The body of POST /v1/analyze for a mixed-reward group and a zero-signal group."""
    lm = load_model(model_root / TINY, name="tiny")
    groups = [
        GroupInput("Q: 47+38=?\nA:", answers=[" 85", " 84 no", " 85 ok"],
                   reward=RewardSpec("numeric", "85")),
        GroupInput("Q: 2+2=?\nA:", answers=[" 4 is it", " 4"], rewards=[1.0, 1.0]),
    ]  # fmt: skip
    return analysis_json(analyze(lm, groups, AnalysisConfig(ratio=0.3)))
