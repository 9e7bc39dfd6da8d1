"""The server builds (or checks) and loads the library's C kernels at startup, off the event loop:
the first request never compiles them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from gmts_core import native
from gmts_core.native import build
from tests.app.api_helpers import given_body, make_settings


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler here: nothing to build")
def test_kernels_are_built_at_startup_and_no_request_compiles(
    model_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GMTS_NATIVE", "1")
    monkeypatch.setenv("GMTS_NATIVE_CACHE", str(tmp_path / "cache"))  # nothing built yet
    monkeypatch.setattr(native, "_STATE", {})  # as in a fresh server process
    compiles: list[bool] = []  # per compile: whether it ran on a thread with an event loop
    real = build._compile

    def recording(cmd: list[str]) -> None:
        try:
            asyncio.get_running_loop()
            compiles.append(True)
        except RuntimeError:
            compiles.append(False)
        real(cmd)

    monkeypatch.setattr(build, "_compile", recording)
    app = create_app(make_settings(model_root))
    assert compiles == []  # creating the app builds nothing
    with TestClient(app) as client:
        assert compiles and not any(compiles)  # at startup, in a worker thread
        assert native._STATE.get("lib") is not None  # loaded before any request
        at_startup = len(compiles)
        r = client.post("/v1/analyze", json=given_body())
        assert r.status_code == 200, r.text
        body = {"prompt": "Q: 47+38=?\nA:", "num_samples": 2, "max_new_tokens": 4, "seed": 0,
                   "reward": {"kind": "numeric", "reference": "85"}}  # fmt: skip
        sampled = client.post("/v1/analyze", json=body)  # the sampler's decoding step
        assert sampled.status_code == 200, sampled.text
    assert len(compiles) == at_startup  # neither request compiled


def test_startup_with_the_kernels_off(
    model_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GMTS_NATIVE", "0")
    monkeypatch.setenv("GMTS_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_STATE", {})
    with TestClient(create_app(make_settings(model_root))) as client:
        assert client.post("/v1/analyze", json=given_body()).status_code == 200
    assert not (tmp_path / "cache").exists()
