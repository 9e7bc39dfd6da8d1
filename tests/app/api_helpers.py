"""Helpers for the app tests: test settings, request bodies, a live uvicorn server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.live_server import LiveServer, free_port
from tests.patience import PATIENT_LIMITS

__all__ = ["TINY", "LiveServer", "free_port", "given_body", "make_settings"]

TINY = "tiny-llama"


def make_settings(root: Path, **overrides: Any) -> Settings:
    """Test settings: explicit values only (no GMTS_* environment surprises)."""
    values: dict[str, Any] = dict(
        model_roots=[root],
        default_model=TINY,
        torch_threads=1,
        max_new_tokens=8,
        max_answers=16,
        max_step_prompts=32,
        max_step_answers=64,
        max_total_tokens=2048,
        max_prompt_chars=400,
        max_answer_chars=400,
        max_body_bytes=20_000,
        max_queued_jobs=4,
        api_key=None,
        cors_origins=[],
        model_aliases={},
        allow_hub_models=False,
        trust_remote_code=False,
        ui_enabled=False,
        session_state_dir=None,  # in memory unless a test asks for a state folder
        # TestClient's host, besides the loopback names a live server is reached by
        allowed_hosts=["127.0.0.1", "localhost", "::1", "testserver"],
        # time limits far above the work's time on a loaded 2-core CI machine; a listing waits
        # for the background index (it answers as soon as that is done). The tests of a limit
        # (and of the "indexing" state) set their own.
        **PATIENT_LIMITS,
    )
    values.update(overrides)
    return Settings(**values)


def given_body(**overrides: Any) -> dict[str, Any]:
    """A small valid single-form request with given answers and explicit rewards."""
    body: dict[str, Any] = {
        "prompt": "Q: 47+38=?\nA:",
        "answers": [" 7+8=15 carry 1, answer 85", " answer 75", " 85"],
        "rewards": [1, 0, 1],
        "top_alternatives": 2,
    }
    body.update(overrides)
    return body
