"""Liveness and readiness probes."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.api_helpers import given_body, make_settings


def test_healthz_ok(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_readyz_reports_loadable_then_loaded(client: TestClient) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json()["loadable"] is True
    assert r.json()["loaded"] is False  # nothing loads at startup
    assert client.post("/v1/analyze", json=given_body()).status_code == 200
    assert client.get("/readyz").json()["loaded"] is True


def test_readyz_not_ready_when_default_model_missing(model_root: Path) -> None:
    app = create_app(make_settings(model_root, default_model="no-such-model"))
    with TestClient(app) as c:
        r = c.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "not_ready" and body["loadable"] is False
    assert "no-such-model" in body["message"]


def test_health_routes_are_open_with_api_key(model_root: Path) -> None:
    app = create_app(make_settings(model_root, api_key="s3cret"))
    with TestClient(app) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200
        assert c.get("/openapi.json").status_code == 200
