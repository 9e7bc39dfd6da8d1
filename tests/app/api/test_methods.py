"""GET /v1/methods and `gmts methods`: every registered method with its citation."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from typer.testing import CliRunner

import app.cli.methods  # noqa: F401  (registers the command)
from app.cli._app import cli
from gmts_core.methods.selection import list_methods

LITERATURE = {
    "clip_cov": "2505.22617",
    "kl_cov": "2505.22617",
    "lopti": "2505.12929",
    "gtpo": "2508.04349",
    "rsi": "2606.31575",
    "high_prob": "2511.00066",
}


def test_api_lists_every_method_with_its_citation(client: TestClient) -> None:
    r = client.get("/v1/methods")
    assert r.status_code == 200
    methods = {m["name"]: m for m in r.json()["methods"]}
    assert list(methods) == list_methods()
    for name, arxiv in LITERATURE.items():
        assert arxiv in methods[name]["citation"], name
    assert all(m["citation"] and m["description"] and m["details"] for m in methods.values())
    assert methods["gtpo"]["kind"] == "weighting" and methods["all"]["uses_ratio"] is False
    assert "/v1/methods" in client.get("/openapi.json").json()["paths"]


def test_cli_lists_every_method_with_its_citation() -> None:
    r = CliRunner().invoke(cli, ["methods", "--json"])
    assert r.exit_code == 0, r.output
    methods = {m["name"]: m for m in json.loads(r.stdout)["methods"]}
    assert list(methods) == list_methods()
    for name, arxiv in LITERATURE.items():
        assert arxiv in methods[name]["citation"], name
    table = CliRunner().invoke(cli, ["methods"])
    assert table.exit_code == 0
    for name, arxiv in LITERATURE.items():
        assert name in table.stdout and arxiv in table.stdout
