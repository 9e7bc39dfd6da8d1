"""Helpers for the app tests: test settings, request bodies, a live uvicorn server."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from app.core.config import Settings

TINY = "tiny-llama"


def make_settings(root: Path, **overrides: Any) -> Settings:
    """Test settings: explicit values only (no GMTS_* environment surprises)."""
    values: dict[str, Any] = dict(
        model_roots=[root],
        default_model=TINY,
        torch_threads=1,
        max_new_tokens=8,
        max_answers=16,
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """A real uvicorn server on 127.0.0.1 in a background thread."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
