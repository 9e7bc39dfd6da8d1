"""The CLI runs the same analysis core as the API and the UI, under its own limits policy: the
request's checks come before any model work, and its limits are the CLI's, not the server's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli import common, load_commands
from app.schemas.analyze_request import AnalyzeRequest
from app.services.model_registry import ModelRegistry
from app.services.policy import LimitsPolicy
from gmts_core.errors import LimitExceededError

PROMPT = "Q: 47+38=?\nA:"


def test_a_bad_reference_fails_before_any_model_work(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[Any] = []
    resolves: list[Any] = []
    monkeypatch.setattr(ModelRegistry, "load", lambda self, ref: loads.append(ref))
    real_resolve = ModelRegistry.resolve
    monkeypatch.setattr(
        ModelRegistry,
        "resolve",
        lambda self, *a, **k: resolves.append(a) or real_resolve(self, *a, **k),
    )
    args = ["analyze", "--prompt", PROMPT, "-n", "2", "--reference", "eighty-five"]
    result = CliRunner().invoke(load_commands(), args)
    assert result.exit_code == 2, result.output
    assert "reward.reference" in result.output and "numeric reference" in result.output
    assert loads == [] and resolves == []  # the check ran before the model was even named


def test_the_cli_has_its_own_larger_limits() -> None:
    settings = common.services().settings
    server, cli = LimitsPolicy.server(settings), LimitsPolicy.cli(settings)
    assert cli.max_top_alternatives > server.max_top_alternatives
    assert cli.max_answers > server.max_answers and cli.any_model_source
    body = {
        "prompt": PROMPT, "answers": [" 85", " 75"], "rewards": [1, 0],
        "top_alternatives": server.max_top_alternatives + 1,
    }  # fmt: skip
    req = AnalyzeRequest.model_validate(body)
    analysis = common.services().analysis
    with pytest.raises(LimitExceededError, match="GMTS_MAX_TOP_ALTERNATIVES"):
        analysis.run(req)  # the server's policy: refused before any model work
    out = analysis.run(req, common.cli_limits())  # the CLI's: the same core runs it
    assert len(out.answers[0].tokens[0].alternatives) == server.max_top_alternatives + 1


def test_gmts_analyze_prints_what_the_core_returns() -> None:
    args = ["analyze", "--prompt", PROMPT, "--answer", " 85", "--answer", " 75"]
    result = CliRunner().invoke(load_commands(), [*args, "--rewards", "1,0", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    req = AnalyzeRequest.model_validate(
        {"prompt": PROMPT, "answers": [" 85", " 75"], "rewards": [1, 0], "model": "tiny-arith"}
    )
    core = common.services().analysis.run(req, common.cli_limits()).model_dump(mode="json")
    assert body["summary"] == json.loads(json.dumps(core["summary"]))
