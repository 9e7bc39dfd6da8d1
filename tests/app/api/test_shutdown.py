"""Abandoned work stops: disconnected clients' jobs, and everything on SIGTERM.

- Clients that disconnect: a running RL step stops at its next stage boundary and queued jobs
  leave the queue without running; the queue drains and the server keeps serving.
- ``gmts serve`` receiving SIGTERM during a (practically endless) RL step exits within
  ``GMTS_SHUTDOWN_GRACE_S`` plus the watchdog margin, far sooner than the step would take.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.serve import WATCHDOG_MARGIN_S
from app.main import create_app
from tests.app.api_helpers import TINY, LiveServer, free_port, given_body, make_settings
from tests.patience import PATIENCE_S

ENDLESS_STEPS = 100_000  # hours of RL steps: only cancellation ends them early


def _until(cond: Callable[[], bool], tries: int = 1200, pause_s: float = 0.1) -> bool:
    """Poll ``cond`` (a server's state) until it holds; False if it never did."""
    pause = threading.Event()
    for _ in range(tries):
        if cond():
            return True
        pause.wait(pause_s)
    return False


def _open_request(port: int, path: str, body: dict[str, Any]) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_disconnected_clients_leave_no_work_behind(model_root: Path) -> None:
    settings = make_settings(model_root, max_session_steps=ENDLESS_STEPS, max_queued_jobs=8)
    app = create_app(settings)
    jobs = app.state.services.jobs
    with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=120) as http:
        sid = http.post("/v1/sessions", json={"group_size": 2, "prompts_per_step": 1}).json()[
            "session_id"
        ]
        running = _open_request(live.port, f"/v1/sessions/{sid}/step", {"steps": ENDLESS_STEPS})
        assert _until(lambda: jobs.running == 1)
        queued = [_open_request(live.port, "/v1/analyze", given_body()) for _ in range(3)]
        assert _until(lambda: jobs.waiting == 3)
        # the waiting clients leave first: their jobs leave the line without running (were the
        # running job stopped first, the next in line could take its slot before its own
        # client's disconnect is seen, and be stopped rather than dropped)
        for sock in queued:
            sock.close()
        assert _until(lambda: jobs.waiting == 0)
        assert jobs.dropped == 3 and jobs.stopped == 0 and jobs.running == 1
        running.close()  # the running job stops at its next stage boundary
        assert _until(lambda: jobs.running == 0)
        assert jobs.stopped == 1 and jobs.dropped == 3
        steps_done = http.get(f"/v1/sessions/{sid}").json()["steps_done"]
        assert steps_done < ENDLESS_STEPS
        # the session and the server are fine afterwards
        assert http.post(f"/v1/sessions/{sid}/step", json={"steps": 1}).status_code == 200
        assert http.post("/v1/analyze", json=given_body()).status_code == 200


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_during_an_rl_step_exits_within_the_grace_period(
    model_root: Path, tmp_path: Path
) -> None:
    grace = 1.0
    port = free_port()
    env = {
        **os.environ,
        "GMTS_MODEL_ROOTS": str(model_root),
        "GMTS_DEFAULT_MODEL": TINY,
        "GMTS_SHUTDOWN_GRACE_S": str(grace),
        "GMTS_MAX_SESSION_STEPS": str(ENDLESS_STEPS),
        "GMTS_UI_ENABLED": "false",
        "GMTS_TORCH_THREADS": "1",
        "GMTS_MAX_NEW_TOKENS": "8",
    }
    cmd = [sys.executable, "-c", "from app.cli import main; main()", "serve", "--port", str(port)]
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None

        assert _until(up) and proc.poll() is None
        body = {"group_size": 2, "prompts_per_step": 1, "max_new_tokens": 8}
        created = httpx.post(
            f"{url}/v1/sessions", json=body, timeout=120, headers={"X-Request-ID": "create-1"}
        )
        assert created.headers["x-request-id"] == "create-1"
        sid = created.json()["session_id"]
        answer: dict[str, Any] = {}

        def step() -> None:
            try:
                r = httpx.post(
                    f"{url}/v1/sessions/{sid}/step", json={"steps": ENDLESS_STEPS}, timeout=300
                )
                answer["status"] = r.status_code
            except httpx.HTTPError as exc:
                answer["status"] = type(exc).__name__

        client = threading.Thread(target=step)
        client.start()
        running = lambda: httpx.get(f"{url}/readyz", timeout=PATIENCE_S).json()["jobs_running"] == 1  # noqa: E731
        assert _until(running)
        proc.send_signal(signal.SIGTERM)
        # the documented bound: the grace period, then cancelled jobs stop (watchdog margin)
        proc.wait(timeout=grace + WATCHDOG_MARGIN_S + 10)  # raises TimeoutExpired if not
        client.join(PATIENCE_S)
        assert answer["status"] == 503  # told, not dropped
        log.flush()
        assert "[create-1]" in (tmp_path / "serve.log").read_text()  # log lines carry the id
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
