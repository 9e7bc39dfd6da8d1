"""Limits per client outside the job queue, through a real uvicorn server.

- Wrong ``/v1`` keys: a client past ``GMTS_KEY_FAILURES_PER_MINUTE`` gets 429 + Retry-After
  (even with the right key: guessing stays bounded); another client is unaffected.
- ``X-Forwarded-For`` is ignored unless the connection comes from ``GMTS_TRUSTED_PROXIES``:
  rotating it gives no fresh allowance; behind a trusted proxy it names the client.
- The UI login lock is per client: the locked one is refused, the right password from any other
  client logs in.
- UI uploads: at most ``GMTS_UI_UPLOAD_MAX_BYTES`` each (413) and
  ``GMTS_UI_UPLOADS_PER_CLIENT`` per ``GMTS_UI_UPLOAD_TTL_S`` per client (429); uploaded files
  are deleted after the TTL (Gradio's cache clean-up is configured with it).
- Other ``/ui`` bodies are capped by ``GMTS_UI_MAX_BODY_BYTES``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.api.client_limits import FailureWindow
from app.main import create_app
from tests.app.api_helpers import LiveServer, make_settings

KEY = "right-key"
RIGHT = {"Authorization": f"Bearer {KEY}"}
WRONG = {"Authorization": "Bearer nope"}


def test_failure_window_locks_one_client_for_a_minute() -> None:
    now = [0.0]
    window = FailureWindow(3, 60.0, clock=lambda: now[0])
    for _ in range(3):
        assert window.retry_after("a") is None
        window.record("a")
    assert window.retry_after("a") == 61 and window.retry_after("b") is None
    now[0] = 30.0
    assert window.retry_after("a") == 31
    now[0] = 60.5
    assert window.retry_after("a") is None  # the failures are a minute old


def test_wrong_keys_are_rate_limited_per_client(model_root: Path) -> None:
    settings = make_settings(model_root, api_key=KEY, key_failures_per_minute=3)
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url) as http:
        statuses = [http.get("/v1/models", headers=WRONG).status_code for _ in range(3)]
        assert statuses == [401, 401, 401]
        locked = http.get("/v1/models", headers=WRONG)
        assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1
        assert "GMTS_KEY_FAILURES_PER_MINUTE" in locked.json()["error"]["message"]
        # the locked address is refused even with the right key (no unlimited guessing)...
        assert http.get("/v1/models", headers=RIGHT).status_code == 429
        # ... and a forged X-Forwarded-For (no trusted proxy configured) changes nothing
        forged = {**WRONG, "X-Forwarded-For": "203.0.113.9"}
        assert http.get("/v1/models", headers=forged).status_code == 429
        assert http.get("/healthz").status_code == 200  # health is never limited


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_allowance(
    model_root: Path,
) -> None:
    settings = make_settings(
        model_root, api_key=KEY, key_failures_per_minute=2, trusted_proxies=["127.0.0.1"]
    )
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url) as http:
        a = {"X-Forwarded-For": "198.51.100.1"}
        b = {"X-Forwarded-For": "198.51.100.2"}
        for _ in range(2):
            assert http.get("/v1/models", headers={**WRONG, **a}).status_code == 401
        assert http.get("/v1/models", headers={**WRONG, **a}).status_code == 429
        assert http.get("/v1/models", headers={**RIGHT, **b}).status_code == 200
        assert http.get("/v1/models", headers={**WRONG, **b}).status_code == 401


@pytest.fixture(scope="module", params=["with a key", "open"])
def ui_server(model_root: Path, request: pytest.FixtureRequest) -> LiveServer:
    settings = make_settings(
        model_root,
        api_key=KEY if request.param == "with a key" else None,
        ui_enabled=True,
        login_attempts_per_minute=3,
        trusted_proxies=["127.0.0.1"],
        ui_upload_max_bytes=10_000,
        ui_uploads_per_client=3,
        ui_max_body_bytes=50_000,
    )
    with LiveServer(create_app(settings)) as live:
        yield live


def _login(url: str, password: str, client_ip: str) -> httpx.Response:
    return httpx.post(
        f"{url}/ui/login",
        data={"username": "teacher", "password": password},
        headers={"X-Forwarded-For": client_ip},
    )


def test_login_lock_is_per_client_and_never_refuses_another_clients_right_password(
    ui_server: LiveServer,
) -> None:
    if ui_server.app.state.settings.api_key is None:
        pytest.skip("no login without a key")
    url = ui_server.url
    attacker, teacher = "192.0.2.66", "192.0.2.10"
    assert [_login(url, "guess", attacker).status_code for _ in range(3)] == [400] * 3
    assert _login(url, "guess", attacker).status_code == 429
    assert _login(url, KEY, attacker).status_code == 429  # the locked client stays locked
    ok = _login(url, KEY, teacher)
    assert ok.status_code == 200, ok.text  # the right password from another client works
    assert _login(url, "typo", teacher).status_code == 400  # and it has its own allowance


def _upload(url: str, size: int, client_ip: str) -> httpx.Response:
    files = {"files": ("compare.json", b"{" + b" " * (size - 2) + b"}", "application/json")}
    return httpx.post(
        f"{url}/ui/gradio_api/upload",
        files=files,
        headers={"X-Forwarded-For": client_ip},
        timeout=60,
    )


def test_uploads_are_limited_in_size_and_count_per_client(ui_server: LiveServer) -> None:
    url = ui_server.url
    big = _upload(url, 20_000, "192.0.2.20")
    assert big.status_code == 413 and "GMTS_UI_UPLOAD_MAX_BYTES" in big.text
    if ui_server.app.state.settings.api_key is not None:
        assert _upload(url, 1_000, "192.0.2.20").status_code == 401  # Gradio wants the login
        return
    stored = []
    for _ in range(3):
        r = _upload(url, 1_000, "192.0.2.21")
        assert r.status_code == 200, r.text
        stored.extend(r.json())
    over = _upload(url, 1_000, "192.0.2.21")
    assert over.status_code == 429 and "GMTS_UI_UPLOADS_PER_CLIENT" in over.text
    assert int(over.headers["retry-after"]) >= 1
    assert _upload(url, 1_000, "192.0.2.22").status_code == 200  # another client may
    assert all(Path(p).is_file() for p in stored)


def test_other_ui_bodies_are_capped(ui_server: LiveServer) -> None:
    r = httpx.post(
        f"{ui_server.url}/ui/gradio_api/queue/join",
        content=b"{" + b" " * 60_000 + b"}",
        headers={"Content-Type": "application/json", "X-Forwarded-For": "192.0.2.30"},
    )
    assert r.status_code == 413 and "GMTS_UI_MAX_BODY_BYTES" in r.text


def test_uploaded_files_are_deleted_after_the_ttl(model_root: Path) -> None:
    from app.ui.mount import mount_ui

    settings = make_settings(model_root, ui_upload_ttl_s=120)
    from fastapi import FastAPI

    app = FastAPI()
    app.state.settings = settings
    mount_ui(app, settings, create_app(settings).state.services)
    blocks = next(r.app.get_blocks() for r in app.routes if getattr(r, "path", "") == "/ui")
    assert blocks.delete_cache == (30, 120)  # Gradio deletes files older than the TTL
    assert blocks.max_file_size == 10**6
