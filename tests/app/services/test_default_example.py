"""The default example: its stored analysis shows entropy and GMTS disagreeing, and it is what a
fresh analysis of the stored definition gives on the bundled model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.config import Settings
from app.schemas.analyze_request import AnalyzeRequest
from app.services import default_example
from app.services.container import build_services
from app.services.responses import as_json
from app.services.validation import validated
from tests.browser.conftest import demo_model_ready


def test_stored_default_example_shows_a_disagreement() -> None:
    body = default_example.load_default_example()
    assert body is not None
    s = body["summary"]
    zero = [g["summary"]["zero_signal"] for g in body["groups"]]
    assert sum(zero) == 1 and len(zero) >= 3  # one zero-signal group next to mixed ones
    assert s["wasted_share"]["entropy"] > 0 and s["wasted_share"]["gmts"] == 0
    d = next(
        d for d in body["differences"] if (d["method_a"], d["method_b"]) == ("entropy", "gmts")
    )
    assert d["only_a"] >= 1 and d["only_b"] >= 1
    reasons = {r["key"]: r for r in d["reasons"]}
    assert reasons["zero_advantage"]["count_a"] >= 1
    assert default_example.disagreement_score(body) == pytest.approx(body_score(body))


def body_score(body: dict) -> float:
    s = body["summary"]
    return s["wasted_share"]["entropy"] + 1 - s["overlap"]["entropy|gmts"]["jaccard"]


def test_definition_round_trips_and_builds_a_valid_request() -> None:
    example = default_example.default_example()
    assert default_example.DefaultExample.from_json(example.to_json()) == example
    req = validated(AnalyzeRequest, default_example.default_example_request())
    assert len(req.groups or []) == len(example.prompts)
    assert example.chosen_by["script"] == "scripts/choose_default_example.py"


def test_missing_or_broken_files_mean_no_default_example(tmp_path: Path) -> None:
    assert default_example.load_default_example(tmp_path / "absent.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert default_example.load_default_example(bad) is None
    (tmp_path / "empty.json").write_text(json.dumps({"summary": {}}))
    assert default_example.load_default_example(tmp_path / "empty.json") is None


@pytest.mark.slow
@pytest.mark.skipif(not demo_model_ready(), reason="the bundled demo model is not trained")
def test_stored_default_example_is_what_a_fresh_analysis_gives() -> None:
    """If this fails after the demo model was retrained, rerun
    scripts/choose_default_example.py."""
    stored = default_example.load_default_example()
    assert stored is not None
    services = build_services(Settings())
    fresh = as_json(
        services.analysis.run(validated(AnalyzeRequest, default_example.default_example_request()))
    )
    for old, new in zip(stored["groups"], fresh["groups"], strict=True):
        assert [a["text"] for a in old["answers"]] == [a["text"] for a in new["answers"]]
        assert [a["reward"] for a in old["answers"]] == [a["reward"] for a in new["answers"]]
        for a_old, a_new in zip(old["answers"], new["answers"], strict=True):
            for t_old, t_new in zip(a_old["tokens"], a_new["tokens"], strict=True):
                assert t_old["entropy"] == pytest.approx(t_new["entropy"], abs=1e-4)
                for m in ("entropy", "gmts"):
                    assert t_old["selected"][m] == t_new["selected"][m]
