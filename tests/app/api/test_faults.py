"""Fault injection: broken models, corrupt weights, vanishing clients, evicted sessions, OOM.

Each fault must end in a clear JSON error (never a bare 500), leave no job slot taken, change no
model weights, and leave the server answering the next good request.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.main import create_app
from gmts_core.config import RLConfig
from gmts_core.grpo.policy import weights_checksum
from gmts_core.model.loading import LoadedModel
from tests.app.api_helpers import TINY, LiveServer, given_body, make_settings
from tests.patience import PATIENCE_S

SAMPLED = {"prompt": "Q: 1+2=?", "num_samples": 2, "max_new_tokens": 4, "rewards": [1, 0]}
SESSION = {"group_size": 2, "prompts_per_step": 1, "max_new_tokens": 4, "learning_rate": 0.05}
STEP = {"prompts": [{"prompt": "Q: 1+2=?", "reference": "[0-9]", "reward_kind": "regex"}]}


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert body["error"]["message"]
    return str(body["error"]["message"])


def _idle(app: FastAPI, timeout_s: float = PATIENCE_S) -> None:
    """Wait until the job limiter holds no running and no waiting job (else fail)."""
    jobs = app.state.services.jobs
    deadline = time.monotonic() + timeout_s
    while jobs.running or jobs.waiting:
        assert time.monotonic() < deadline, (jobs.running, jobs.waiting)
        time.sleep(0.02)


def _body(lm: LoadedModel) -> torch.nn.Module:
    return getattr(lm.model, lm.model.base_model_prefix)  # type: ignore[no-any-return]


@contextmanager
def hooked(module: torch.nn.Module, hook: Callable[..., Any], pre: bool = False) -> Iterator[None]:
    handle = module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def gated(lm: LoadedModel) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The model's transformer body waits for ``release`` inside the real forward pass."""
    entered, release = threading.Event(), threading.Event()

    def hook(*_args: object) -> None:
        entered.set()
        release.wait(PATIENCE_S)

    try:
        with hooked(_body(lm), hook, pre=True):
            yield entered, release
    finally:
        release.set()


@pytest.fixture
def app(model_root: Path) -> FastAPI:
    return create_app(make_settings(model_root, max_concurrent_jobs=1, max_queued_jobs=4))


@pytest.fixture
def base(app: FastAPI) -> LoadedModel:
    return app.state.services.models.get(TINY)  # type: ignore[no-any-return]


# --- a model that returns NaN / Inf logits ------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("body", [given_body(), SAMPLED], ids=["given", "sampled"])
def test_non_finite_logits_are_a_clear_error_and_the_server_stays_up(
    app: FastAPI, base: LoadedModel, value: float, body: dict[str, Any]
) -> None:
    head = base.model.get_output_embeddings()
    with TestClient(app) as client:
        with hooked(head, lambda _m, _i, out: torch.full_like(out, value)):
            message = _error(client.post("/v1/analyze", json=body), 422, "non_finite_logits")
            assert "NaN or infinite logits" in message
            assert client.get("/healthz").status_code == 200
        assert client.post("/v1/analyze", json=body).status_code == 200
    _idle(app)


# --- corrupt weights ----------------------------------------------------------------------------


@pytest.fixture
def corrupt_root(tmp_path: Path, model_root: Path) -> Path:
    """A root with the tiny model, a truncated copy and a copy whose weights are garbage."""
    root = tmp_path / "models"
    shutil.copytree(model_root / TINY, root / TINY)
    weights = (model_root / TINY / "model.safetensors").read_bytes()
    shutil.copytree(model_root / TINY, root / "truncated")
    (root / "truncated" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    shutil.copytree(model_root / TINY, root / "garbage")
    (root / "garbage" / "model.safetensors").write_bytes(b"\xff" * 64 + weights[64:])
    return root


def test_corrupt_weights_are_a_clear_load_error_and_other_models_serve(corrupt_root: Path) -> None:
    app = create_app(make_settings(corrupt_root))
    with TestClient(app) as client:
        for name in ("truncated", "garbage", "truncated"):  # twice: a failure is not cached
            message = _error(
                client.post("/v1/analyze", json=given_body(model=name)), 422, "model_load_failed"
            )
            assert "could not load model" in message
        assert client.post("/v1/analyze", json=given_body(model=TINY)).status_code == 200
        listed = {m["alias"]: m for m in client.get("/v1/models").json()["models"]}
        assert {"truncated", "garbage", TINY} <= set(listed)
        assert listed[TINY]["loaded"] and not listed["truncated"]["loaded"]
    assert app.state.services.models.cache.loaded_names() == [TINY]
    _idle(app)


# --- clients that go away -----------------------------------------------------------------------


def _raw_post(port: int, body: dict[str, Any], send_all: bool = True) -> socket.socket:
    """Send POST /v1/analyze on a raw socket (all of it, or the headers and half the body)."""
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/analyze HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S)
    sock.sendall(head + (data if send_all else data[: len(data) // 2]))
    return sock


def _wait_for(predicate: Callable[[], bool], timeout_s: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_clients_closing_the_socket_leak_no_job_slot(app: FastAPI, base: LoadedModel) -> None:
    jobs = app.state.services.jobs
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
        _raw_post(server.port, given_body(), send_all=False).close()  # gone mid-body
        with gated(base) as (entered, release):
            running = _raw_post(server.port, given_body())
            assert entered.wait(PATIENCE_S), "the analysis never reached the forward pass"
            queued = _raw_post(server.port, given_body())
            _wait_for(lambda: jobs.waiting == 1)
            running.close()  # both clients vanish: one mid-forward, one in the queue
            queued.close()
            release.set()
        _idle(app)
        assert http.post("/v1/analyze", json=given_body()).status_code == 200
        ready = http.get("/readyz").json()
        assert ready["jobs_running"] == 0 and ready["jobs_waiting"] == 0


def test_cancelled_requests_through_the_asgi_app_leak_no_job_slot(
    app: FastAPI, base: LoadedModel
) -> None:
    jobs = app.state.services.jobs

    async def cancel_both(entered: threading.Event, release: threading.Event) -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:

            async def post() -> None:
                await client.post("/v1/analyze", json=given_body())

            async with anyio.create_task_group() as tg:
                tg.start_soon(post)  # takes the slot and waits at the gate
                tg.start_soon(post)  # waits in the queue
                assert await anyio.to_thread.run_sync(entered.wait, PATIENCE_S)
                while jobs.waiting != 1:
                    await anyio.sleep(0.01)
                threading.Timer(0.3, release.set).start()
                # cancelled mid-flight; anyio lets the worker threads finish (they cannot be
                # interrupted), and the slots must come back when they do
                tg.cancel_scope.cancel()

    with gated(base) as (entered, release):
        anyio.run(cancel_both, entered, release)
    _idle(app)
    assert jobs.running == 0 and jobs.waiting == 0
    with TestClient(app) as client:
        assert client.post("/v1/analyze", json=given_body()).status_code == 200


# --- a session that disappears while its step waits for a slot ----------------------------------


@pytest.mark.parametrize("how", ["evicted", "deleted"])
def test_session_gone_while_its_step_is_queued_is_a_clear_404(model_root: Path, how: str) -> None:
    app = create_app(
        make_settings(model_root, max_concurrent_jobs=1, max_queued_jobs=4, max_sessions=1)
    )
    sessions = app.state.services.sessions
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
        r = http.post("/v1/sessions", json=SESSION)
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        base = app.state.services.models.get(TINY)
        with gated(base) as (entered, release), ThreadPoolExecutor(2) as pool:
            busy = pool.submit(http.post, "/v1/analyze", json=given_body())
            assert entered.wait(PATIENCE_S)
            step = pool.submit(http.post, f"/v1/sessions/{sid}/step", json=STEP)
            _wait_for(lambda: app.state.services.jobs.waiting == 1)
            if how == "evicted":  # a new session of the same client takes the only place
                owner = sessions.store.owner(sid)
                sessions.store.create(base, RLConfig(group_size=2, max_new_tokens=4), owner=owner)
            else:
                assert http.delete(f"/v1/sessions/{sid}").status_code == 204
            release.set()
            assert busy.result().status_code == 200
            message = _error(step.result(), 404, "unknown_session")
        assert how in message and sid in message
        _idle(app)
        assert http.get("/healthz").status_code == 200
        assert http.post("/v1/analyze", json=given_body()).status_code == 200


# --- out of memory ------------------------------------------------------------------------------


def _oom(*_args: object) -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")


def test_out_of_memory_in_analysis_is_503_and_corrupts_nothing(
    app: FastAPI, base: LoadedModel
) -> None:
    before = weights_checksum(base.model)
    with TestClient(app) as client:
        for body in (given_body(), SAMPLED):
            with hooked(_body(base), _oom, pre=True):
                r = client.post("/v1/analyze", json=body)
            assert "out of memory" in _error(r, 503, "out_of_memory")
            assert int(r.headers["retry-after"]) >= 1
        assert client.post("/v1/analyze", json=given_body()).status_code == 200
    assert weights_checksum(base.model) == before
    _idle(app)


def test_out_of_memory_in_a_training_step_is_503_and_changes_no_weights(
    app: FastAPI, base: LoadedModel
) -> None:
    base_before = weights_checksum(base.model)
    with TestClient(app) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["session_id"]
        session = app.state.services.sessions.store.get(sid)
        policy_before = session.policy.checksum()

        def oom_when_training(*_args: object) -> None:
            if torch.is_grad_enabled():  # after sampling and scoring: in the loss's forward
                _oom()

        with hooked(_body(session.policy.as_loaded()), oom_when_training, pre=True):
            r = client.post(f"/v1/sessions/{sid}/step", json=STEP)
        _error(r, 503, "out_of_memory")
        assert session.policy.checksum() == policy_before
        assert client.get(f"/v1/sessions/{sid}").json()["steps_done"] == 0
        r = client.post(f"/v1/sessions/{sid}/step", json=STEP)
        assert r.status_code == 200, r.text
        assert r.json()["steps_done"] == 1
    assert weights_checksum(base.model) == base_before
    _idle(app)
