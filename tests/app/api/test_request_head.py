"""Hosts, proxies and request heads (issue 36, item 9), through a real uvicorn server.

- A forged ``X-Forwarded-Host`` from a client that is no trusted proxy is dropped: the ``/ui``
  redirect and Gradio's config name the server's own host; a ``Host`` outside
  ``GMTS_ALLOWED_HOSTS`` is a 400, also as a trusted proxy's ``X-Forwarded-Host``.
- Too many headers: 431; a head over ``GMTS_MAX_HEADER_BYTES``: refused by the parser; a
  connection that never finishes its head is closed after ``GMTS_HEADER_TIMEOUT_S``.
- A locked address (too many wrong keys) presenting the right key still gets in.
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from tests.app.api_helpers import LiveServer, make_settings
from tests.patience import PATIENCE_S

KEY = "right-key-" + "x" * 20


@pytest.fixture(scope="module")
def ui_server(model_root: Path):  # type: ignore[no-untyped-def]
    app = create_app(make_settings(model_root, ui_enabled=True))
    with LiveServer(app) as live:
        yield live


def test_a_forged_forwarded_host_is_not_reflected(ui_server: LiveServer) -> None:
    evil = {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}
    r = httpx.get(f"{ui_server.url}/ui", headers=evil)
    assert r.status_code in (200, 307, 308), r.text[:300]
    assert "evil.example" not in r.headers.get("location", "")
    config = httpx.get(f"{ui_server.url}/ui/config", headers=evil)
    assert config.status_code == 200
    assert "evil.example" not in config.text
    assert "127.0.0.1" in config.json().get("root", "127.0.0.1")


def test_an_unknown_host_is_refused(ui_server: LiveServer) -> None:
    r = httpx.get(f"{ui_server.url}/healthz", headers={"Host": "evil.example"})
    assert r.status_code == 400
    assert "GMTS_ALLOWED_HOSTS" in r.json()["error"]["message"]
    assert httpx.get(f"{ui_server.url}/healthz", headers={"Host": "localhost:1"}).status_code == 200


def test_too_many_headers_and_too_large_a_head_are_refused(ui_server: LiveServer) -> None:
    many = [(f"x-h{i}", "1") for i in range(2000)]
    assert httpx.get(f"{ui_server.url}/healthz", headers=many).status_code == 431
    try:
        r = httpx.get(f"{ui_server.url}/healthz", headers={"x-big": "a" * 10_000_000})
        status = r.status_code
    except httpx.HTTPError:  # the server closed the connection on the oversized head
        status = 0
    assert status != 200
    assert httpx.get(f"{ui_server.url}/healthz").status_code == 200


def test_an_unfinished_head_is_closed(model_root: Path) -> None:
    app = create_app(make_settings(model_root, header_timeout_s=1))
    with LiveServer(app) as live, socket.create_connection(("127.0.0.1", live.port)) as s:
        s.settimeout(60)  # far above the limit: only a server that never closes fails
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        assert s.recv(1024) == b""  # closed by the server, nothing answered


def test_behind_a_trusted_proxy_its_forwarded_host_is_checked(model_root: Path) -> None:
    settings = make_settings(model_root, trusted_proxies=["127.0.0.1"])
    with LiveServer(create_app(settings)) as live:
        ok = httpx.get(f"{live.url}/healthz", headers={"X-Forwarded-Host": "localhost"})
        assert ok.status_code == 200
        bad = httpx.get(f"{live.url}/healthz", headers={"X-Forwarded-Host": "evil.example"})
        assert bad.status_code == 400


def test_a_locked_address_with_the_right_key_gets_in(model_root: Path) -> None:
    settings = make_settings(model_root, api_key=KEY, key_failures_per_minute=2)
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url) as http:
        wrong = {"Authorization": "Bearer nope"}
        assert [http.get("/v1/models", headers=wrong).status_code for _ in range(2)] == [401] * 2
        assert http.get("/v1/models", headers=wrong).status_code == 429  # locked
        right = http.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert right.status_code == 200, right.text
        assert http.get("/v1/models", headers=wrong).status_code == 429  # still locked


def _slow_body(port: int) -> socket.socket:
    """A connection that sends a whole head announcing a 1,000-byte body, then one byte."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        b"POST /v1/analyze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    return s


def test_slow_bodies_are_cut_off_and_one_client_cannot_take_every_socket(
    model_root: Path,
) -> None:
    """1,100 slow-body connections from one address: those over its cap are closed at once,
    the rest once their body is overdue; meanwhile another address (127.0.0.2) is served, and
    after the deadline so is the first."""
    settings = make_settings(model_root, body_timeout_s=2, max_connections_per_client=32)
    with LiveServer(create_app(settings)) as live:
        slow = [_slow_body(live.port) for _ in range(1_100)]
        try:
            other = httpx.HTTPTransport(local_address="127.0.0.2")
            with httpx.Client(transport=other, timeout=PATIENCE_S) as client:
                assert client.get(f"{live.url}/healthz").status_code == 200
            for s in slow:
                s.settimeout(60)  # far above the deadline: only a server that never cuts fails
                try:
                    data = s.recv(1024)
                except ConnectionResetError:
                    data = b""
                assert data == b"" or b"HTTP/1.1" in data  # closed (or answered), never held
            assert httpx.get(f"{live.url}/healthz", timeout=PATIENCE_S).status_code == 200
        finally:
            for s in slow:
                s.close()
