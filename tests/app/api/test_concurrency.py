"""Inference runs off the event loop under the job limiter; models load once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx

from app.main import create_app
from gmts_core.model.loading import LoadedModel
from tests.app.api_helpers import TINY, LiveServer, given_body, make_settings
from tests.patience import PATIENCE_S


@contextmanager
def gated(lm: LoadedModel) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Make the model's transformer body wait for ``release`` inside the real forward pass."""
    entered, release = threading.Event(), threading.Event()
    body = getattr(lm.model, lm.model.base_model_prefix)

    def hook(*_args: object) -> None:
        entered.set()
        release.wait(PATIENCE_S)

    handle = body.register_forward_pre_hook(hook)
    try:
        yield entered, release
    finally:
        release.set()
        handle.remove()


def test_healthz_answers_while_an_analysis_runs_and_full_queue_is_429(model_root: Path) -> None:
    app = create_app(make_settings(model_root, max_concurrent_jobs=1, max_queued_jobs=0))
    lm = app.state.services.models.get(TINY)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
        with gated(lm) as (entered, release):
            results: dict[str, httpx.Response] = {}
            slow = threading.Thread(
                target=lambda: results.update(r=http.post("/v1/analyze", json=given_body()))
            )
            slow.start()
            assert entered.wait(PATIENCE_S), "the analysis never reached the forward pass"
            # the analysis is held in its forward pass: an answer now means the loop is free
            assert http.get("/healthz").status_code == 200
            assert http.get("/readyz").json()["jobs_running"] == 1
            busy = http.post("/v1/analyze", json=given_body())
            assert busy.status_code == 429
            assert busy.json()["error"]["code"] == "queue_full"
            assert int(busy.headers["retry-after"]) >= 1
            release.set()
            slow.join(PATIENCE_S)
        assert results["r"].status_code == 200
        assert http.post("/v1/analyze", json=given_body()).status_code == 200  # free again


def test_queued_jobs_wait_for_a_slot(model_root: Path) -> None:
    app = create_app(make_settings(model_root, max_concurrent_jobs=1, max_queued_jobs=1))
    lm = app.state.services.models.get(TINY)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
        with gated(lm) as (entered, release), ThreadPoolExecutor(2) as pool:
            first = pool.submit(http.post, "/v1/analyze", json=given_body())
            assert entered.wait(PATIENCE_S)
            second = pool.submit(http.post, "/v1/analyze", json=given_body())
            deadline = time.monotonic() + PATIENCE_S
            while http.get("/readyz").json()["jobs_waiting"] != 1:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert http.post("/v1/analyze", json=given_body()).status_code == 429
            release.set()
            assert first.result().status_code == 200 and second.result().status_code == 200


def test_each_model_loads_once_under_concurrent_requests(model_root: Path) -> None:
    registry = create_app(make_settings(model_root)).state.services.models
    with ThreadPoolExecutor(4) as pool:
        models = list(pool.map(lambda _: registry.get(TINY), range(8)))
    assert len({id(m) for m in models}) == 1
    assert registry.cache.loaded_names() == [TINY]
