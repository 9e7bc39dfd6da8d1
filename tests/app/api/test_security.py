"""Security defaults: API key, model-name resolution, no remote code, no pickles, closed CORS."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.api_helpers import TINY, given_body, make_settings

KEY = "s3cret-key"


@pytest.fixture
def keyed(model_root: Path):
    with TestClient(create_app(make_settings(model_root, api_key=KEY))) as c:
        yield c


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}, {"X-Key": KEY}],
)
def test_v1_needs_the_key_when_set(keyed: TestClient, headers: dict) -> None:
    for r in (
        keyed.get("/v1/models", headers=headers),
        keyed.post("/v1/analyze", json=given_body(), headers=headers),
        keyed.post("/v1/analyze/export", json=given_body(), headers=headers),
    ):
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
    assert keyed.app.state.services.models.cache.loaded_names() == []


def test_right_key_passes(keyed: TestClient) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    assert keyed.get("/v1/models", headers=auth).status_code == 200
    assert keyed.post("/v1/analyze", json=given_body(), headers=auth).status_code == 200


def test_no_key_configured_means_open(client: TestClient) -> None:
    assert client.get("/v1/models").status_code == 200


def test_openapi_declares_the_bearer_scheme_only_with_a_key(
    keyed: TestClient, client: TestClient
) -> None:
    spec = keyed.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert spec["paths"]["/v1/analyze"]["post"]["security"] == [{"HTTPBearer": []}]
    assert "securitySchemes" not in client.get("/openapi.json").json().get("components", {})


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory, model_root: Path) -> Path:
    """A valid model folder outside the allowed root, and a symlink to it inside the root."""
    folder = tmp_path_factory.mktemp("outside") / "evil"
    shutil.copytree(model_root / TINY, folder)
    link = model_root / "link-out"
    if not link.exists():
        link.symlink_to(folder, target_is_directory=True)
    return folder


def _traversal_names(root: Path, outside: Path) -> list[str]:
    rel = f"../{outside.parent.name}/{outside.name}"
    return [
        rel,
        f"{TINY}/../{rel}",
        str(outside),
        f"{root}/../{outside.parent.name}/{outside.name}",
        "link-out",
        "%2e%2e/" + outside.parent.name + "/" + outside.name,
        "..%2F" + outside.parent.name + "%2F" + outside.name,
        "%252e%252e%252f" + outside.name,
        "..\\" + outside.parent.name + "\\" + outside.name,
        "~/" + outside.name,
        "/etc",
        TINY + "\x00",
        "gpt2",
        "Qwen/Qwen2.5-0.5B",
    ]


def test_model_names_cannot_escape_the_roots(client: TestClient, model_root: Path, outside: Path):
    for name in _traversal_names(model_root, outside):
        r = client.post("/v1/analyze", json=given_body(model=name))
        assert r.status_code == 404, (name, r.text)
        assert r.json()["error"]["code"] == "model_not_found"
    assert client.app.state.services.models.cache.loaded_names() == []
    listed = [m["alias"] for m in client.get("/v1/models").json()["models"]]
    assert "link-out" not in listed and TINY in listed


def test_absolute_path_inside_a_root_is_allowed(client: TestClient, model_root: Path) -> None:
    r = client.post("/v1/analyze", json=given_body(model=str(model_root / TINY)))
    assert r.status_code == 200, r.text
    assert r.json()["model"] == TINY  # the canonical name, not the server path


def test_hub_ids_are_off_by_default(client: TestClient) -> None:
    r = client.post("/v1/analyze", json=given_body(model="gpt2"))
    assert "GMTS_ALLOW_HUB_MODELS" in r.json()["error"]["message"]


def test_remote_code_never_runs_by_default(tmp_path: Path, model_root: Path) -> None:
    root = tmp_path / "root"
    folder = root / "custom"
    shutil.copytree(model_root / TINY, folder)
    marker = tmp_path / "remote-code-ran"
    config = json.loads((folder / "config.json").read_text())
    config.update(
        model_type="evil_custom",
        auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"},
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    with TestClient(create_app(make_settings(root))) as c:
        r = c.post("/v1/analyze", json=given_body(model="custom"))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "model_load_failed"
    assert not marker.exists()


def _preflight(c: TestClient, origin: str):  # noqa: ANN202
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    return c.options("/v1/analyze", headers=headers)


def test_cors_is_closed_by_default(client: TestClient) -> None:
    r = _preflight(client, "http://evil.example")
    assert "access-control-allow-origin" not in r.headers
    r = client.get("/v1/models", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_allows_only_configured_origins(model_root: Path) -> None:
    settings = make_settings(model_root, cors_origins=["http://good.example"])
    with TestClient(create_app(settings)) as c:
        good = _preflight(c, "http://good.example")
        assert good.headers["access-control-allow-origin"] == "http://good.example"
        assert "access-control-allow-origin" not in _preflight(c, "http://evil.example").headers
