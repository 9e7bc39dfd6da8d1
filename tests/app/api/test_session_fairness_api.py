"""Through a real server: one client's creates never evict another client's sessions, and one
client's jobs never fill the job queue (#36 item 8). Two clients reach the server through a
trusted proxy (127.0.0.1), named by ``X-Forwarded-For``; a forged header from an untrusted
address would name nobody."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from app.main import create_app
from tests.app.api_helpers import LiveServer, given_body, make_settings
from tests.patience import PATIENCE_S

KNOBS = {"group_size": 2, "prompts_per_step": 1, "max_new_tokens": 4}


def test_a_flooding_client_gets_429_and_the_others_keep_their_sessions(model_root: Path) -> None:
    settings = make_settings(
        model_root, max_sessions=4, max_sessions_per_client=2, trusted_proxies=["127.0.0.1"]
    )
    with (
        LiveServer(create_app(settings)) as live,
        httpx.Client(base_url=live.url, timeout=300) as http,
    ):
        victim = {"X-Forwarded-For": "198.51.100.1"}
        flood = {"X-Forwarded-For": "198.51.100.2"}
        kept = [http.post("/v1/sessions", json=KNOBS, headers=victim) for _ in range(2)]
        assert [r.status_code for r in kept] == [201, 201], kept[0].text
        for expected in (201, 201, 429, 429, 429):
            r = http.post("/v1/sessions", json=KNOBS, headers=flood)
            assert r.status_code == expected, r.text
        assert r.json()["error"]["code"] == "too_many_sessions"
        assert "GMTS_MAX_SESSIONS_PER_CLIENT" in r.json()["error"]["message"]
        assert int(r.headers["retry-after"]) >= 1
        for s in kept:
            assert http.get(f"/v1/sessions/{s.json()['session_id']}").status_code == 200


def test_a_client_at_its_job_cap_gets_429_while_another_gets_in_line(model_root: Path) -> None:
    """The only job slot is held (by a job of no client, released by the test); client A's
    analyses wait in the queue up to GMTS_MAX_JOBS_PER_CLIENT, its next one is a 429 naming the
    setting at once, while client B's still gets a place; all the admitted ones are answered."""
    settings = make_settings(
        model_root, max_queued_jobs=8, max_jobs_per_client=2, trusted_proxies=["127.0.0.1"]
    )
    with LiveServer(create_app(settings)) as live:
        jobs = live.app.state.services.jobs
        release = threading.Event()
        holder = threading.Thread(target=jobs.run_blocking, args=(lambda: release.wait(300),))
        holder.start()
        answers: list[httpx.Response] = []

        def analyze(client: str) -> None:
            headers = {"X-Forwarded-For": client}
            answers.append(
                httpx.post(
                    live.url + "/v1/analyze", json=given_body(), headers=headers, timeout=300
                )
            )

        def admitted(n: int) -> None:
            with jobs._changed:
                assert jobs._changed.wait_for(lambda: jobs._admitted == n, 120), jobs._admitted

        a, b = "198.51.100.1", "198.51.100.2"
        waiting = [threading.Thread(target=analyze, args=(a,)) for _ in range(2)]
        for t in waiting:
            t.start()
        admitted(3)
        refused = httpx.post(
            live.url + "/v1/analyze",
            json=given_body(),
            headers={"X-Forwarded-For": a},
            timeout=PATIENCE_S,
        )
        assert refused.status_code == 429, refused.text
        assert "GMTS_MAX_JOBS_PER_CLIENT" in refused.json()["error"]["message"]
        assert int(refused.headers["retry-after"]) >= 1
        waiting.append(threading.Thread(target=analyze, args=(b,)))
        waiting[-1].start()
        admitted(4)
        release.set()
        for t in [holder, *waiting]:
            t.join(300)
        assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
        assert jobs._per_client == {}
