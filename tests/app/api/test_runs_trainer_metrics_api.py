"""GET /v1/runs/{id} carries what the trainer itself logged (TRL's trainer_state.json, verl's
file logger), in the one response model the OpenAPI schema shows."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.api_helpers import make_settings

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("runs")
    for name in ("trl", "verl"):
        shutil.copytree(DATA / name, root / name)
    shutil.copytree(DATA / "trl", root / "bomb")
    deep = '{"log_history": [' + "[" * 5000 + "]" * 5000 + "]}"
    (root / "bomb" / "trainer_state.json").write_text(deep)
    settings = make_settings(tmp_path_factory.mktemp("m"), run_roots=[root])
    with TestClient(create_app(settings)) as c:
        yield c


def test_overview_holds_the_trainers_logged_entropy(client: TestClient) -> None:
    body = client.get("/v1/runs/trl").json()
    history = json.loads((DATA / "trl" / "trainer_state.json").read_text())["log_history"]
    metrics = body["trainer_metrics"]
    assert (
        metrics["format"] == "trl_trainer_state" and metrics["source"] == "trl/trainer_state.json"
    )
    assert metrics["series"]["entropy"] == [h["entropy"] for h in history if "entropy" in h]
    verl = client.get("/v1/runs/verl").json()["trainer_metrics"]
    assert verl["keys"]["entropy"] == "actor/entropy" and verl["steps"] == [0, 1, 2, 3]
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert "TrainerMetricsOut" in schema
    assert "trainer_metrics" in schema["RunOverviewResponse"]["properties"]


def test_a_hostile_trainer_log_is_an_error_field_not_a_failed_overview(client: TestClient) -> None:
    r = client.get("/v1/runs/bomb")
    assert r.status_code == 200
    body = r.json()
    assert body["steps"] == [1, 2, 3] and body["trainer_metrics"] is None
    assert body["trainer_metrics_error"].startswith("bomb/trainer_state.json: ")
    assert client.get("/healthz").status_code == 200
