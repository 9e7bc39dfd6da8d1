"""Sessions survive a restart and a delete stops a running step.

- ``gmts serve`` killed with SIGKILL in the middle of a class (a long step request running):
  a new server on the same state folder continues the session where its last finished step
  left it: the same history, log-probs bit-equal to a session that was never interrupted (the
  same seed, the same number of steps) and the next step identical to that one's.
- Deleting a session while its step runs stops the step at its next stage boundary; the step's
  request ends with a 404 saying the session was deleted (not a 200), and its saved state is
  gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.app.api_helpers import TINY, LiveServer, free_port, make_settings
from tests.patience import PATIENCE_S

KNOBS = {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 6, "learning_rate": 0.05}
PROBE = {
    "prompt": "Q: 47+38=?\nA:",
    "answers": [" 85", " 7+8=15, answer 75"],
    "rewards": [1, 0],
    "top_alternatives": 0,
}


def _until(cond: Callable[[], bool], tries: int = 1500, pause_s: float = 0.1) -> bool:
    pause = threading.Event()
    for _ in range(tries):
        if cond():
            return True
        pause.wait(pause_s)
    return False


@contextmanager
def serve(model_root: Path, state_dir: Path, log: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    env = {
        **os.environ,
        "GMTS_MODEL_ROOTS": str(model_root),
        "GMTS_DEFAULT_MODEL": TINY,
        "GMTS_SESSION_STATE_DIR": str(state_dir),
        "GMTS_MAX_SESSION_STEPS": "1000",
        "GMTS_UI_ENABLED": "false",
        "GMTS_TORCH_THREADS": "1",
        "GMTS_MAX_NEW_TOKENS": "8",
    }
    cmd = [sys.executable, "-c", "from app.cli import main; main()", "serve", "--port", str(port)]
    with log.open("a") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        assert _until(up) and proc.poll() is None, log.read_text()[-3000:]
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(PATIENCE_S)


def _logprobs(http: httpx.Client, sid: str) -> list[float]:
    r = http.post("/v1/analyze", json={**PROBE, "session_id": sid})
    assert r.status_code == 200, r.text
    return [t["logprob"] for a in r.json()["answers"] for t in a["tokens"]]


def _step(http: httpx.Client, sid: str, steps: int = 1) -> dict[str, Any]:
    r = http.post(f"/v1/sessions/{sid}/step", json={"steps": steps, "include_tokens": False})
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigkill_mid_class_then_the_session_continues_bit_for_bit(
    model_root: Path, tmp_path: Path
) -> None:
    state, log = tmp_path / "state", tmp_path / "serve.log"
    with serve(model_root, state, log) as (url, proc):
        with httpx.Client(base_url=url, timeout=300) as http:
            sid = http.post("/v1/sessions", json={**KNOBS, "seed": 7}).json()["session_id"]
            _step(http, sid, 2)
            # the class goes on: a long step request, killed while it runs
            answer: dict[str, Any] = {}

            def long_step() -> None:
                try:
                    answer["r"] = http.post(f"/v1/sessions/{sid}/step", json={"steps": 1000})
                except httpx.HTTPError as exc:
                    answer["r"] = exc

            client = threading.Thread(target=long_step)
            client.start()
            done = lambda: http.get(f"/v1/sessions/{sid}").json()["steps_done"] >= 4  # noqa: E731
            assert _until(done)
            history_seen = http.get(f"/v1/sessions/{sid}").json()["history"]
            proc.send_signal(signal.SIGKILL)
            proc.wait(PATIENCE_S)
            client.join(PATIENCE_S)
            assert isinstance(answer["r"], httpx.HTTPError)  # the connection died with it
    with serve(model_root, state, log) as (url, _proc):
        with httpx.Client(base_url=url, timeout=300) as http:
            info = http.get(f"/v1/sessions/{sid}").json()
            n = info["steps_done"]
            assert n >= len(history_seen) >= 4  # every finished step was saved
            assert info["history"][: len(history_seen)] == history_seen
            restored = _logprobs(http, sid)
            # a session never interrupted: same seed, same knobs, the same n steps
            ref = http.post("/v1/sessions", json={**KNOBS, "seed": 7}).json()["session_id"]
            _step(http, ref, n)
            assert http.get(f"/v1/sessions/{ref}").json()["history"] == info["history"][:n] or (
                [h["loss"] for h in http.get(f"/v1/sessions/{ref}").json()["history"]]
                == [h["loss"] for h in info["history"]]
            )
            assert restored == _logprobs(http, ref)  # bit-equal weights
            # and the next step is the one the session would have run (optimizer state too)
            after_s, after_ref = _step(http, sid), _step(http, ref)
            assert after_s["steps"][0]["loss"] == after_ref["steps"][0]["loss"]
            assert _logprobs(http, sid) == _logprobs(http, ref)


def test_deleting_a_session_stops_its_running_step(model_root: Path, tmp_path: Path) -> None:
    settings = make_settings(model_root, max_session_steps=1000, session_state_dir=tmp_path)
    app = create_app(settings)
    jobs = app.state.services.jobs
    with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=300) as http:
        sid = http.post("/v1/sessions", json=KNOBS).json()["session_id"]
        assert (tmp_path / sid / "meta.json").is_file()  # saved from the start
        answer: dict[str, Any] = {}
        client = threading.Thread(
            target=lambda: answer.update(
                r=http.post(f"/v1/sessions/{sid}/step", json={"steps": 1000})
            )
        )
        client.start()
        assert _until(lambda: http.get(f"/v1/sessions/{sid}").json()["steps_done"] >= 1)
        assert http.delete(f"/v1/sessions/{sid}").status_code == 204
        client.join(120)
        r = answer["r"]
        assert r.status_code == 404, r.text
        assert "deleted while its step ran" in r.json()["error"]["message"]
        assert _until(lambda: jobs.running == 0)
        assert not (tmp_path / sid).exists()
        assert http.get(f"/v1/sessions/{sid}").status_code == 404


def test_options_on_a_session_lists_delete(model_root: Path) -> None:
    app = create_app(make_settings(model_root))
    with LiveServer(app) as live:
        r = httpx.options(f"{live.url}/v1/sessions/abc")
        assert r.status_code == 204
        allow = {m.strip() for m in r.headers["allow"].split(",")}
        assert {"GET", "DELETE", "OPTIONS"} <= allow
        r = httpx.options(f"{live.url}/v1/sessions")
        assert "POST" in r.headers["allow"]
        assert httpx.options(f"{live.url}/v1/nothing-here").status_code in (404, 405)
