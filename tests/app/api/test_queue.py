"""Waiting told honestly: a queued request's place in the queue and estimated wait, and every job
response's seconds in the queue and at work."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from app.main import create_app
from app.services.jobs import JobLimiter
from tests.app.api.test_concurrency import gated
from tests.app.api_helpers import TINY, LiveServer, given_body, make_settings
from tests.patience import PATIENCE_S


def test_estimate_is_place_times_the_mean_job_duration_over_the_slots() -> None:
    now = [0.0]
    jobs = JobLimiter(max_concurrent=2, max_queued=8, clock=lambda: now[0])
    assert jobs.estimate_wait_s(1) is None  # nothing to go by yet

    def work() -> None:
        now[0] += 10.0

    jobs.run_blocking(work)
    assert jobs.mean_job_s == 10.0
    assert jobs.estimate_wait_s(0) == 0.0
    assert jobs.estimate_wait_s(1) == 10.0 and jobs.estimate_wait_s(2) == 10.0
    assert jobs.estimate_wait_s(3) == 20.0  # two slots: places 3 and 4 wait two jobs
    now[0] += 0
    jobs.run_blocking(lambda: None)  # a 0 s job pulls the running mean down
    assert jobs.mean_job_s is not None and jobs.mean_job_s < 10.0


def _wait_for(cond, timeout_s: float = PATIENCE_S) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_queued_request_can_see_its_place_and_estimate(model_root: Path) -> None:
    app = create_app(make_settings(model_root, max_concurrent_jobs=1, max_queued_jobs=4))
    lm = app.state.services.models.get(TINY)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
        warm = http.post("/v1/analyze", json=given_body())  # a finished job: a mean to go by
        assert warm.status_code == 200
        assert float(warm.headers["x-work-s"]) > 0 and float(warm.headers["x-queue-wait-s"]) >= 0
        with gated(lm) as (entered, release), ThreadPoolExecutor(3) as pool:

            def send(rid: str) -> httpx.Response:
                return http.post("/v1/analyze", json=given_body(), headers={"X-Request-ID": rid})

            first = pool.submit(send, "first")
            assert entered.wait(PATIENCE_S)
            second = pool.submit(send, "second")
            assert _wait_for(lambda: http.get("/v1/queue/second").status_code == 200)
            third = pool.submit(send, "third")
            assert _wait_for(lambda: http.get("/v1/queue/third").status_code == 200)
            running = http.get("/v1/queue/first").json()
            assert running["state"] == "running" and running["place"] == 0
            s2, s3 = http.get("/v1/queue/second").json(), http.get("/v1/queue/third").json()
            assert (s2["state"], s2["place"]) == ("waiting", 1)
            assert (s3["state"], s3["place"]) == ("waiting", 2)
            assert 0 < s2["estimated_wait_s"] <= s3["estimated_wait_s"]
            line = http.get("/v1/queue").json()
            assert line["running"] == 1 and line["waiting"] == 2 and line["next_place"] == 3
            assert line["estimated_wait_s"] >= s3["estimated_wait_s"]
            assert http.get("/readyz").json()["estimated_wait_s"] == line["estimated_wait_s"]
            release.set()
            done = [f.result() for f in (first, second, third)]
        assert all(r.status_code == 200 for r in done)
        # the third waited for two jobs: its wait is reported apart from its work
        assert float(done[2].headers["x-queue-wait-s"]) > 0
        assert http.get("/v1/queue/third").status_code == 404  # finished
