"""Through a real server: one client's creates never evict another client's sessions (#36 item
8). Two clients reach the server through a trusted proxy (127.0.0.1), named by
``X-Forwarded-For``; a forged header from an untrusted address would name nobody."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.main import create_app
from tests.app.api_helpers import LiveServer, make_settings

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
