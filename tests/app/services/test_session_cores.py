"""The session service's cores (create, step, reset, evaluate) are the one synchronous path:
the UI's local backend runs them inside the job queue, the routes wrap them (``*_queued``).
A session saved by one server and used first after a restart is restored by either path, and
its model loads inside a job slot in both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.schemas.sessions import SessionCreateRequest, SessionStepRequest
from app.services.container import Services, build_services
from app.ui.local_backend import LocalBackend
from gmts_core.errors import LimitExceededError
from tests.app.api_helpers import make_settings

KNOBS: dict[str, Any] = {"group_size": 2, "prompts_per_step": 1, "max_new_tokens": 4}


def _slots_at_load(services: Services, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The running jobs each time the registry loads a model (1: inside a job slot)."""
    seen: list[int] = []
    load = services.models.load

    def counted(ref: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(services.jobs.running)
        return load(ref, *args, **kwargs)

    monkeypatch.setattr(services.models, "load", counted)
    return seen


def _saved_session(model_root: Path, state: Path) -> str:
    """A session created and stepped once by a server that then goes away."""
    first = build_services(make_settings(model_root, session_state_dir=state))
    sid = first.sessions.create(SessionCreateRequest(**KNOBS, seed=3)).session_id
    assert first.sessions.step(sid, SessionStepRequest(steps=1)).steps_done == 1
    return sid


def test_the_ui_restores_a_saved_session_inside_its_job_slot(
    model_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _saved_session(model_root, tmp_path)
    services = build_services(make_settings(model_root, session_state_dir=tmp_path))
    loads = _slots_at_load(services, monkeypatch)
    backend = LocalBackend(services, on_wait=lambda _message: None)
    assert backend.step_session(sid, {"steps": 1}).steps_done == 2
    assert loads == [1]  # restored once, in the step's slot
    assert backend.evaluate_session(sid, {"num_problems": 2}).num_problems == 2
    assert backend.reset_session(sid).steps_done == 0
    assert loads == [1] and services.jobs.running == 0


def test_the_route_restores_a_saved_session_in_a_job_slot(
    model_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _saved_session(model_root, tmp_path)
    app = create_app(make_settings(model_root, session_state_dir=tmp_path))
    loads = _slots_at_load(app.state.services, monkeypatch)
    with TestClient(app) as client:
        r = client.post(f"/v1/sessions/{sid}/step", json={"steps": 1})
        assert r.status_code == 200, r.text
        assert r.json()["steps_done"] == 2
    assert loads == [1]


def test_a_core_refuses_before_any_model_work(model_root: Path) -> None:
    services = build_services(make_settings(model_root, max_session_steps=2))
    sid = services.sessions.create(SessionCreateRequest(**KNOBS)).session_id
    with pytest.raises(LimitExceededError, match="GMTS_MAX_SESSION_STEPS"):
        services.sessions.step(sid, SessionStepRequest(steps=3))
    assert services.sessions.info(sid).steps_done == 0
