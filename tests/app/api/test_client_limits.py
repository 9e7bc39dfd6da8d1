"""Limits per client outside the job queue, through a real uvicorn server.

- Wrong ``/v1`` keys: a client past ``GMTS_KEY_FAILURES_PER_MINUTE`` gets 429 + Retry-After
  (the right key still gets in); another client is unaffected.
- ``X-Forwarded-For`` is ignored unless the connection comes from ``GMTS_TRUSTED_PROXIES``:
  rotating it gives no fresh allowance; behind a trusted proxy it names the client.
- The UI login lock is per client: the locked one is refused, the right password from any other
  client logs in.
- UI uploads: at most ``GMTS_UI_UPLOAD_MAX_BYTES`` each (413) and
  ``GMTS_UI_UPLOADS_PER_CLIENT`` per ``GMTS_UI_UPLOAD_TTL_S`` per client (429); an upload
  is deleted when the browser session that used it ends (its tab closed), and any upload
  after the TTL (Gradio's cache clean-up is configured with it): both seen to go.
- Other ``/ui`` bodies are capped by ``GMTS_UI_MAX_BODY_BYTES``.
"""

from __future__ import annotations

import json
import queue
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import gradio as gr
import httpx
import pytest

from app.api.client_limits import FailureWindow
from app.main import create_app
from app.ui.uploads import SessionUploads
from tests.app.api_helpers import LiveServer, make_settings
from tests.patience import PATIENCE_S

COMPARE_JSON = Path(__file__).resolve().parents[3] / "docs" / "compare" / "compare.json"
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
        # the lock is for wrong keys: the right key from the locked address gets in (#36)...
        assert http.get("/v1/models", headers=RIGHT).status_code == 200
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
        timeout=PATIENCE_S,
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


def _blocks(app: Any) -> Any:
    return next(r.app.get_blocks() for r in app.routes if getattr(r, "path", "") == "/ui")


def test_uploaded_files_are_deleted_after_the_ttl(
    model_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload no event ever used (no session owns it) is deleted by Gradio's clean-up once
    older than GMTS_UI_UPLOAD_TTL_S: each clean-up run is waited for, until the file is gone."""
    import gradio.route_utils as route_utils

    runs: queue.Queue[int | None] = queue.Queue()
    clean_up = route_utils.delete_files_created_by_app

    def counted(blocks: Any, age: int | None) -> None:
        clean_up(blocks, age)
        runs.put(age)

    monkeypatch.setattr(route_utils, "delete_files_created_by_app", counted)
    settings = make_settings(model_root, ui_enabled=True, ui_upload_ttl_s=1)
    with LiveServer(create_app(settings)) as live:
        blocks = _blocks(live.app)
        assert blocks.delete_cache == (1, 1) and blocks.max_file_size == 10**6
        r = _upload(live.url, 1_000, "192.0.2.40")
        assert r.status_code == 200, r.text
        (stored,) = (Path(p) for p in r.json())
        assert stored.is_file()
        for _ in range(20):  # a run per second; the first one past the TTL deletes it
            assert runs.get(timeout=PATIENCE_S) == 1, "Gradio's clean-up did not run"
            if not stored.exists():
                break
        assert not stored.exists(), "the upload outlived its TTL"


class _Session:
    """A browser session of the UI, as Gradio's page holds one: a heartbeat connection (open
    while the tab is), and events sent with its ``session_hash``."""

    def __init__(self, url: str, config: dict[str, Any]) -> None:
        self.base = f"{url}/ui/gradio_api"
        self.hash = uuid.uuid4().hex
        (self.upload_id,) = [
            c["id"]
            for c in config["components"]
            if c.get("props", {}).get("elem_id") == "compare-upload"
        ]
        (self.fn,) = [
            d["id"] for d in config["dependencies"] if [self.upload_id, "upload"] in d["targets"]
        ]
        self._stack = ExitStack()
        self.http = self._stack.enter_context(httpx.Client(base_url=self.base, timeout=PATIENCE_S))
        beat = self._stack.enter_context(httpx.Client(timeout=PATIENCE_S))
        heartbeat = self._stack.enter_context(
            beat.stream("GET", f"{self.base}/heartbeat/{self.hash}")
        )
        assert heartbeat.status_code == 200
        self._beats = heartbeat.iter_lines()  # kept: a dropped iterator closes the connection
        assert next(self._beats) == "data: ALIVE"

    def load_compare(self, content: bytes) -> Path:
        """Upload ``content`` as compare.json in the Compare tab (its upload event)."""
        up = self.http.post("/upload", files={"files": ("compare.json", content, "text/json")})
        assert up.status_code == 200, up.text
        (path,) = up.json()
        data = {"path": path, "orig_name": "compare.json", "meta": {"_type": "gradio.FileData"}}
        body = {
            "data": [data],
            "fn_index": self.fn,
            "trigger_id": self.upload_id,
            "session_hash": self.hash,
            "event_data": None,
        }
        assert self.http.post("/queue/join", json=body).status_code == 200
        with self.http.stream("GET", "/queue/data", params={"session_hash": self.hash}) as events:
            for line in events.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if message.get("msg") == "process_completed":
                    assert message["success"], message
                    return Path(path)
        raise AssertionError("the upload event never completed")

    def close(self) -> None:
        """The tab closes: its heartbeat connection goes."""
        self._stack.close()


def test_a_sessions_uploads_are_removed_when_the_session_ends(
    model_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real server, two browser sessions each load compare.json files; when one tab
    closes (its heartbeat connection goes), its uploads are deleted at once (the Blocks' unload
    event), long before the TTL, except one the other session uploaded too; the other
    session's files stay until that one closes."""
    released: queue.Queue[str] = queue.Queue()
    release = SessionUploads.release

    def told(self: SessionUploads, request: gr.Request) -> None:
        release(self, request)
        released.put(str(request.session_hash))

    monkeypatch.setattr(SessionUploads, "release", told)
    content = COMPARE_JSON.read_bytes()
    settings = make_settings(model_root, ui_enabled=True, ui_upload_ttl_s=3600)
    with LiveServer(create_app(settings)) as live:
        config = httpx.get(f"{live.url}/ui/config", timeout=PATIENCE_S).json()
        first, second = _Session(live.url, config), _Session(live.url, config)
        try:
            mine = first.load_compare(content)
            theirs = second.load_compare(content + b"\n")  # other content: another file
            shared = first.load_compare(content + b" ")
            assert second.load_compare(content + b" ") == shared  # the same content: one file
            assert len({mine, theirs, shared}) == 3
            assert all(p.is_file() for p in (mine, theirs, shared))
            first.close()
            assert released.get(timeout=PATIENCE_S) == first.hash
            assert not mine.exists() and theirs.is_file() and shared.is_file()
            second.close()
            assert released.get(timeout=PATIENCE_S) == second.hash
            assert not theirs.exists() and not shared.exists()
        finally:
            first.close()
            second.close()
