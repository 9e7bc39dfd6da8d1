"""The paper's method `gmts_paper` is offered wherever methods are listed, and selects within
each group by default when it is the only method chosen."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

import app.cli.analyze  # noqa: F401  (registers the command)
from app.cli._app import cli
from app.core.config import Settings
from app.services.catalog import capabilities
from app.ui.choices import method_choices
from tests.app.api_helpers import given_body


def test_api_lists_it_and_defaults_its_scope_to_group(client: TestClient) -> None:
    body = given_body()
    r = client.post("/v1/analyze", json=body)
    assert r.status_code == 200, r.text
    assert "gmts_paper" in r.json()["answers"][0]["tokens"][0]["scores"]  # a default method
    assert r.json()["summary"]["scope"] == "batch"
    alone = client.post("/v1/analyze", json={**body, "selection": {"methods": ["gmts_paper"]}})
    assert alone.status_code == 200, alone.text
    assert alone.json()["summary"]["scope"] == "group"
    explicit = {"methods": ["gmts_paper"], "scope": "answer"}
    r = client.post("/v1/analyze", json={**body, "selection": explicit})
    assert r.json()["summary"]["scope"] == "answer"
    schema = client.get("/openapi.json").json()
    assert "gmts_paper" in json.dumps(schema)


def test_cli_help_lists_it_and_defaults_its_scope(tiny_llama_dir: Path) -> None:
    runner = CliRunner()
    assert "gmts_paper" in runner.invoke(cli, ["analyze", "--help"], terminal_width=200).output
    args = ["analyze", "--model", str(tiny_llama_dir), "--prompt", "Q: 1+2=?", "--json"]
    args += ["--answer", " 3", "--answer", " 4", "--rewards", "1,0", "--method", "gmts_paper"]
    r = runner.invoke(cli, args)
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert body["summary"]["scope"] == "group"
    assert list(body["answers"][0]["tokens"][0]["scores"]) == ["gmts_paper"]


def test_ui_offers_it() -> None:
    caps = capabilities(Settings())  # the UI reads the typed response, as its backends return it
    assert "gmts_paper" in [value for _, value in method_choices(caps)]


def test_a_session_with_the_paper_method_takes_its_defaults() -> None:
    """Chosen for a session, gmts_paper brings Framework1's defaults (scope group, kl_beta
    0.001) unless the request says otherwise; gmts_paper_verl its scope; gmts neither."""
    from app.schemas.sessions import SessionCreateRequest
    from gmts_core.config import RLConfig

    base = RLConfig()
    paper = SessionCreateRequest(method="gmts_paper").apply(base)
    assert (paper.scope, paper.beta) == ("group", 0.001)
    explicit = SessionCreateRequest(method="gmts_paper", beta=0.0, scope="batch").apply(base)
    assert (explicit.scope, explicit.beta) == ("batch", 0.0)
    verl = SessionCreateRequest(method="gmts_paper_verl").apply(base)
    assert (verl.scope, verl.beta) == ("group", base.beta)
    plain = SessionCreateRequest(method="gmts").apply(base)
    assert (plain.scope, plain.beta) == ("batch", base.beta)
