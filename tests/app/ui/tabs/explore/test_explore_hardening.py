"""The UI side of the hardening: explicit rewards win, login rate limit, waiting in the queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.main import create_app
from app.services.catalog import capabilities
from app.services.errors import QueueFullError
from app.services.jobs import JobLimiter, wait_in_queue
from app.services.responses import as_json
from app.ui.remote_backend import RemoteBackend
from app.ui.tabs.explore.view import ExploreForm, build_request, reward_note, rule_overridden
from tests.app.api_helpers import make_settings
from tests.patience import PATIENCE_S


def test_explicit_rewards_win_over_a_rule_and_the_note_says_so() -> None:
    form = ExploreForm(
        prompt="Q", answers_text="a\nb\nc\nd", reference="85", explicit_rewards="0,0,0,0"
    )
    body = build_request(form)
    assert body["rewards"] == [0, 0, 0, 0] and "reward" not in body
    assert "explicit rewards" in reward_note(form) and "'numeric' rule" in reward_note(form)
    assert rule_overridden(form) and not rule_overridden(ExploreForm(reference="85"))
    rule = ExploreForm(prompt="Q", reference="85")
    assert build_request(rule)["reward"] == {"kind": "numeric", "reference": "85"}
    assert "numeric" in reward_note(rule) and "85" in reward_note(rule)


def test_ui_login_is_rate_limited_per_address(model_root: Path) -> None:
    settings = make_settings(
        model_root, api_key="s3cret", ui_enabled=True, login_attempts_per_minute=3
    )
    with TestClient(create_app(settings)) as client:
        statuses = [
            client.post("/ui/login", data={"username": "x", "password": "no"}).status_code
            for _ in range(5)
        ]
        assert statuses[:3] == [400, 400, 400] or all(s >= 400 for s in statuses[:3])
        assert statuses[3:] == [429, 429]
        locked = client.post("/ui/login", data={"username": "x", "password": "s3cret"})
        assert locked.status_code == 429 and "Retry-After" in locked.headers


def test_a_blocking_caller_waits_in_line_instead_of_a_429() -> None:
    import threading

    jobs = JobLimiter(max_concurrent=1, max_queued=0)
    release, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(PATIENCE_S)

    first = threading.Thread(target=lambda: jobs.run_blocking(hold))
    first.start()
    started.wait(PATIENCE_S)
    with pytest.raises(QueueFullError):  # without waiting in the queue: refused
        jobs.run_blocking(lambda: None)
    notified: list[str] = []
    result: dict[str, Any] = {}

    def queued() -> None:
        with wait_in_queue(60, notified.append):
            result["value"] = jobs.run_blocking(lambda: 42)

    second = threading.Thread(target=queued)
    second.start()
    while not notified:
        threading.Event().wait(0.02)
    release.set()
    first.join(PATIENCE_S)
    second.join(PATIENCE_S)
    assert result["value"] == 42 and "waits in the queue" in notified[0]


def test_the_remote_ui_backend_retries_a_busy_server() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            body = {"error": {"code": "queue_full", "message": "busy"}}
            return httpx.Response(429, json=body, headers={"Retry-After": "1"})
        return httpx.Response(200, json=as_json(capabilities(Settings())))

    notified: list[str] = []
    backend = RemoteBackend("http://x", on_wait=notified.append, sleep=lambda _s: None)
    backend._client = httpx.Client(base_url="http://x", transport=httpx.MockTransport(handler))
    assert backend.capabilities() == capabilities(Settings())  # the body, as its model
    assert len(calls) == 3 and len(notified) == 1


def test_ui_handlers_obey_the_same_limits_before_model_work(model_root: Path) -> None:
    from app.ui.local_backend import LocalBackend
    from gmts_core.errors import InvalidInputError, LimitExceededError

    services = create_app(make_settings(model_root)).state.services
    ui = LocalBackend(services)
    sid = ui.create_session({"group_size": 2, "prompts_per_step": 1}).session_id
    long_prompt = {"prompts": [{"prompt": "1" * 100_000, "reference": "2"}]}
    with pytest.raises(LimitExceededError, match="GMTS_MAX_PROMPT_CHARS"):
        ui.step_session(sid, long_prompt)
    bad_ref = {"prompts": [{"prompt": "Q", "reference": "1e10000000"}]}
    with pytest.raises(InvalidInputError, match="numeric reference"):
        ui.step_session(sid, bad_ref)
    with pytest.raises(LimitExceededError, match="GMTS_MAX_EVAL_ANSWERS"):
        ui.evaluate_session(sid, {"num_problems": 2000, "samples_per_problem": 16})
    assert ui.get_session(sid).steps_done == 0  # nothing ran
