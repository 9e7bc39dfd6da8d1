"""GET /v1/models: aliases and folders, loaded state and size facts."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from gmts_core.demo import DEMO_ALIAS
from tests.app.api_helpers import TINY, given_body, make_settings


def _entry(client: TestClient, alias: str) -> dict:
    body = client.get("/v1/models").json()
    return next(m for m in body["models"] if m["alias"] == alias)


def test_lists_builtin_alias_and_root_folders(client: TestClient) -> None:
    r = client.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    aliases = [m["alias"] for m in body["models"]]
    assert DEMO_ALIAS in aliases and TINY in aliases
    assert body["default"] == TINY
    tiny = _entry(client, TINY)
    assert tiny["kind"] == "folder" and tiny["default"] is True and tiny["available"] is True
    assert tiny["loaded"] is False and tiny["device"] is None


def test_size_facts_before_loading_match_the_loaded_model(client: TestClient) -> None:
    before = _entry(client, TINY)
    assert client.post("/v1/analyze", json=given_body()).status_code == 200
    after = _entry(client, TINY)
    assert after["loaded"] is True
    assert after["device"] == "cpu" and after["dtype"] == "float32"
    assert before["parameters"] == after["parameters"] > 0
    assert before["vocab_size"] == after["vocab_size"] > 0
    lm = client.app.state.services.models.get(TINY)
    assert after["parameters"] == sum(p.numel() for p in lm.model.parameters())


def test_configured_alias_is_listed_and_usable(model_root: Path) -> None:
    settings = make_settings(model_root, model_aliases={"mine": str(model_root / TINY)})
    with TestClient(create_app(settings)) as c:
        assert _entry(c, "mine")["kind"] == "alias"
        r = c.post("/v1/analyze", json=given_body(model="mine"))
        assert r.status_code == 200 and r.json()["model"] == "mine"
