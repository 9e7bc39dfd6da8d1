"""Security hardening beyond test_security.py: chunked oversized bodies on a real server,
catastrophic-backtracking regex rewards through the API, HTML injection end to end (API -> UI
renderers, and the /ui page), the API key on every /v1 route, traversal through the sessions."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from app.main import create_app
from app.ui.tabs.explore.view import explore_view
from app.ui.tabs.train import changes as render_changes
from tests.app.api_helpers import TINY, LiveServer, given_body, make_settings
from tests.patience import PATIENCE_S

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
LIMIT = 20_000  # make_settings' max_body_bytes


# --- oversized bodies without Content-Length, on a real uvicorn server --------------------------


def _read_response(
    sock: socket.socket, timeout_s: float = PATIENCE_S
) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of the HTTP response on ``sock`` (the server closes after it)."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body[: _length(data)] or b"{}")


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _stream_chunks(sock: socket.socket, stop: threading.Event, sent: list[int]) -> None:
    """Send 1 kB chunks of a JSON string until the server hangs up or ``stop`` (never ends)."""
    payload = b"x" * 1000
    chunk = f"{len(payload):x}\r\n".encode() + payload + b"\r\n"
    first = b'{"prompt":"'
    try:
        sock.sendall(f"{len(first):x}\r\n".encode() + first + b"\r\n")
        sent[0] += len(first)  # body bytes, as the server counts them
        while not stop.is_set() and sent[0] < 200 * LIMIT:
            sock.sendall(chunk)
            sent[0] += len(payload)
    except OSError:
        pass  # the server closed the connection: what we want


@pytest.mark.parametrize("path", ["/v1/analyze", "/v1/sessions", "/v1/sessions/abc/step"])
def test_endless_chunked_body_is_refused_without_reading_it_all(
    model_root: Path, path: str
) -> None:
    app = create_app(make_settings(model_root))
    with LiveServer(app) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE_S)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        sock.sendall(head.encode())
        stop, sent = threading.Event(), [0]
        sender = threading.Thread(target=_stream_chunks, args=(sock, stop, sent), daemon=True)
        sender.start()
        try:
            status, body = _read_response(sock)
        finally:
            stop.set()
            sender.join(PATIENCE_S)
            sock.close()
        assert status == 413, body
        assert body["error"]["code"] == "payload_too_large"
        assert "GMTS_MAX_BODY_BYTES" in body["error"]["message"]
        # the body never ends (no closing chunk), so a 413 at all means the server answered
        # without waiting for it; how much the sender pushed first depends on the scheduler,
        # but never less than the first byte over the limit (body bytes, chunk framing aside)
        assert sent[0] > LIMIT
        with httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
            assert http.get("/healthz").status_code == 200
            assert http.post("/v1/analyze", json=given_body()).status_code == 200
    assert len(app.state.services.sessions.store) == 0


def test_huge_declared_length_is_refused_before_the_body_is_sent(model_root: Path) -> None:
    app = create_app(make_settings(model_root))
    with LiveServer(app) as server, socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(
            b"POST /v1/analyze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000000000\r\n\r\n{"
        )
        status, body = _read_response(s)
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert app.state.services.models.cache.loaded_names() == []


# --- catastrophic-backtracking regex rewards ----------------------------------------------------

EVIL_PATTERN = r"(a+)+$"


def test_backtracking_regex_reward_returns_promptly_and_blocks_nothing(model_root: Path) -> None:
    # the per-match cut-off is the subject: the request's reward budget (test_hardening.py's
    # subject) is set out of its way, as a loaded machine can spend 5 s on eight cut-offs
    settings = make_settings(model_root, max_total_tokens=20_000, reward_budget_s=PATIENCE_S)
    app = create_app(settings)
    answers = ["a" * 199 + "!"] * 8  # 2**199 paths to try for each, without the timeout
    body = {"prompt": "q", "answers": answers, "reward": {"kind": "regex", "reference": ""}}
    body["reward"]["reference"] = EVIL_PATTERN
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
        assert http.post("/v1/analyze", json=given_body()).status_code == 200  # model loaded
        result: dict[str, Any] = {}

        def evil_request() -> None:
            result["r"] = http.post("/v1/analyze", json=body)

        worker = threading.Thread(target=evil_request)
        worker.start()
        assert http.get("/healthz").status_code == 200  # the event loop stays free
        worker.join(PATIENCE_S)
    # without the cut-off each match would try 2**199 paths: an answer at all is the test
    r = result["r"]
    assert r.status_code == 200, r.text
    assert all(a["reward"] == 0 for a in r.json()["answers"])
    verdicts = {a["reward_detail"]["verdict"] for a in r.json()["answers"]}
    assert verdicts <= {"timeout", "incorrect"}, verdicts


def test_backtracking_regex_in_a_session_step_returns_promptly(client: TestClient) -> None:
    sid = client.post(
        "/v1/sessions", json={"group_size": 2, "max_new_tokens": 4, "prompts_per_step": 1}
    ).json()["session_id"]
    prompt = {"prompt": "a" * 300, "reference": EVIL_PATTERN, "reward_kind": "regex"}
    r = client.post(f"/v1/sessions/{sid}/step", json={"prompts": [prompt]})
    assert r.status_code == 200, r.text  # returned at all: each match is cut off
    assert all(a["reward"] == 0 for a in r.json()["last_batch"])


def test_oversized_regex_pattern_is_a_clear_error(client: TestClient) -> None:
    body = given_body(rewards=None, reward={"kind": "regex", "reference": "(a|b)" * 200})
    r = client.post("/v1/analyze", json=body)
    assert r.status_code in (413, 422), r.text
    assert "regex pattern" in r.json()["error"]["message"]


# --- HTML injection: from the API into the UI's renderers, and the /ui page ---------------------


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_inert(html: str, must_show: str = "<script>") -> None:
    """No script/img/iframe element, no on* handler, no javascript: URL; the text still shows."""
    parsed = _Collector()
    parsed.feed(html)
    tags = {t for t, _ in parsed.tags}
    assert not tags & {"script", "img", "iframe", "svg", "object", "embed"}, tags
    for _, attrs in parsed.tags:
        assert not any(k.startswith("on") for k in attrs), attrs
        assert not any("javascript:" in (v or "").lower() for v in attrs.values()), attrs
    assert must_show in "".join(parsed.text)


def test_html_in_prompts_answers_and_references_is_inert_in_the_explore_view(
    client: TestClient,
) -> None:
    body = {
        "prompt": f"Q: 47+38=?{EVIL}\nA:",
        "answers": [f" answer 85 {EVIL}", " 75", EVIL],
        "reward": {"kind": "regex", "reference": "<img src=x onerror=alert[(]1[)]>|85"},
        "selection": {"methods": ["entropy", "gmts"]},
    }
    r = client.post("/v1/analyze", json=body)
    assert r.status_code == 200, r.text
    view = explore_view(r.json(), "entropy", "gmts", "entropy")
    assert_inert(view.tokens_html)
    assert_inert(view.learn_html, must_show="")
    assert "onerror=alert" in view.tokens_html.replace("&quot;", '"')  # escaped, still visible


def test_html_in_a_training_prompt_is_inert_in_the_train_view(client: TestClient) -> None:
    sid = client.post("/v1/sessions", json={"group_size": 2, "max_new_tokens": 4}).json()[
        "session_id"
    ]
    prompt = {"prompt": f"Q: 1+1=? {EVIL}", "reference": "2", "reward_kind": "numeric"}
    r = client.post(f"/v1/sessions/{sid}/step", json={"prompts": [prompt]})
    assert r.status_code == 200, r.text
    batch = r.json()["last_batch"]
    batch[0]["tokens"][0]["text"] = EVIL  # as if the model had written it
    assert_inert(render_changes.render_batch_changes(batch))


@pytest.fixture(scope="module")
def ui_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("ui-models")
    with TestClient(create_app(make_settings(root, ui_enabled=True))) as c:
        yield c


@pytest.mark.parametrize(
    "url",
    [
        "/ui/?__theme=" + EVIL,
        "/ui/?q=" + EVIL,
        "/ui/" + EVIL,
        "/ui/file=" + EVIL,
    ],
)
def test_the_ui_page_does_not_reflect_markup(ui_client: TestClient, url: str) -> None:
    r = ui_client.get(url)
    assert r.status_code < 500
    assert EVIL not in r.text and "window.__pwned" not in r.text


# --- the API key on every /v1 route -------------------------------------------------------------

KEY = "k3y-for-every-route"


def _v1_calls(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path) under /v1: from the OpenAPI document (FastAPI >= 0.16x nests
    included routers, so ``app.routes`` no longer lists them flat) and from any flat APIRoute."""
    operations = {
        (method.upper(), path)
        for path, item in app.openapi()["paths"].items()
        for method in item
        if path.startswith("/v1")
    }
    operations |= {
        (method, route.path)
        for route in app.routes
        if isinstance(route, APIRoute) and route.path.startswith("/v1")
        for method in route.methods
    }
    calls = []
    for method, path in sorted(operations):
        concrete = (
            path.replace("{session_id}", "no-such-session")
            .replace("{run_id}", "no-such-run")
            .replace("{step}", "1")
            .replace("{n}", "1")
            .replace("{group}", "0")
            .replace("{answer}", "0")
            .replace("{request_id}", "no-such-request")
        )
        assert "{" not in concrete, f"fill in the path parameter of {path}"
        calls.append((method, concrete))
    return calls


def test_every_v1_route_needs_the_key(model_root: Path) -> None:
    # many wrong keys from one address: the per-client limit would answer 429 (tested apart)
    app = create_app(make_settings(model_root, api_key=KEY, key_failures_per_minute=100_000))
    calls = _v1_calls(app)
    paths = {p for _, p in calls}
    assert {"/v1/analyze", "/v1/models", "/v1/sessions"} <= paths
    assert any(p.startswith("/v1/sessions/no-such-session") for p in paths)
    bad_headers: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {KEY}x"},
        {"Authorization": f"bearer{KEY}"},
        {"Authorization": f"Token {KEY}"},
        {"X-API-Key": KEY},
    ]
    with TestClient(app) as client:
        for method, path in calls:
            for headers in bad_headers:
                r = client.request(method, path, json={}, headers=headers)
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.json()["error"]["code"] == "unauthorized"
            r = client.request(method, path, json={}, headers={"Authorization": f"Bearer {KEY}"})
            assert r.status_code not in (401, 500), (method, path, r.text)
            if "no-such-session" in path:
                assert r.status_code == 404, (method, path, r.text)


def test_refused_requests_change_nothing(model_root: Path) -> None:
    app = create_app(make_settings(model_root, api_key=KEY))
    with TestClient(app) as client:
        for method, path in _v1_calls(app):
            client.request(method, path, json={"model": TINY})
    assert app.state.services.models.cache.loaded_names() == []
    assert len(app.state.services.sessions.store) == 0
    assert app.state.services.jobs.running == 0 and app.state.services.jobs.waiting == 0


# --- path traversal through the session routes --------------------------------------------------


@pytest.mark.parametrize(
    "name", ["../tiny-llama", "/etc", "..%2Ftiny-llama", "~/x", "tiny-llama/../../x", "a\\..\\b"]
)
def test_session_models_cannot_escape_the_roots(client: TestClient, name: str) -> None:
    r = client.post("/v1/sessions", json={"model": name})
    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "model_not_found"
    assert len(client.app.state.services.sessions.store) == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/sessions/..%2F..%2Fetc%2Fpasswd",
        "/v1/sessions/%2e%2e/step",
        "/v1/sessions/" + "a" * 129,
        "/v1/sessions/%00",
    ],
)
def test_odd_session_ids_are_clean_errors(client: TestClient, path: str) -> None:
    for method in ("GET", "DELETE"):
        r = client.request(method, path)
        assert r.status_code in (404, 405, 422), (path, r.text)
        assert "error" in r.json()
    r = client.post(path.rstrip("/") + "/step" if not path.endswith("step") else path, json={})
    assert r.status_code in (404, 405, 422), (path, r.text)
    assert "error" in r.json()
