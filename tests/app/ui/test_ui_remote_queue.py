"""The UI in remote mode counts down its place in the queue, as the local mode does.

Through a real uvicorn server whose one job slot is held by another client's analysis (its
model held in the forward pass), the remote backend's Analyze waits in the queue: it sends its own
``X-Request-ID``, polls ``GET /v1/queue/{request_id}`` while the request is outstanding and
notifies the same :class:`~app.ui.status.LiveStatus` the local backend notifies ("waiting: 1st in
line, about N s to go"), in the caller's context (where Gradio's progress finds its event);
once the request has finished nothing more is polled or notified.
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from app.main import create_app
from app.schemas.analyze_response import AnalyzeResponse
from app.ui.remote_backend import RemoteBackend
from app.ui.status import LiveStatus
from tests.app.api.test_concurrency import gated
from tests.app.api_helpers import TINY, LiveServer, given_body, make_settings
from tests.patience import PATIENCE_S

EVENT: contextvars.ContextVar[str] = contextvars.ContextVar("event")  # as Gradio's LocalContext


def test_remote_analyze_tells_its_place_in_line_and_the_estimate(model_root: Path) -> None:
    app = create_app(make_settings(model_root, max_concurrent_jobs=1, max_queued_jobs=4))
    lm = app.state.services.models.get(TINY)
    lines: list[str] = []
    contexts: set[str | None] = set()
    waiting = threading.Event()

    def show(text: str, _done: float | None) -> None:
        lines.append(text)
        contexts.add(EVENT.get(None))
        if text.startswith("waiting: 1st in the queue"):
            waiting.set()

    def analyze_in_an_event(backend: RemoteBackend) -> AnalyzeResponse:
        EVENT.set("event-1")
        return backend.analyze(given_body(), LiveStatus(show))

    polled: list[str] = []  # the queue paths the backend asked for, as the server saw them
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=PATIENCE_S) as http:
        assert http.post("/v1/analyze", json=given_body()).status_code == 200  # a mean job time
        backend = RemoteBackend(server.url, poll_s=0.2)
        backend._client.event_hooks["request"].append(
            lambda req: polled.append(req.url.path) if "/v1/queue/" in req.url.path else None
        )
        with gated(lm) as (entered, release), ThreadPoolExecutor(2) as pool:
            first = pool.submit(http.post, "/v1/analyze", json=given_body())
            assert entered.wait(PATIENCE_S), "the first analysis never reached the forward pass"
            mine = pool.submit(analyze_in_an_event, backend)
            assert waiting.wait(PATIENCE_S), f"no place in the queue was notified: {lines}"
            release.set()
            body = mine.result(timeout=PATIENCE_S)
            assert first.result(timeout=PATIENCE_S).status_code == 200
        assert body.answers and len(body.answers) == 3
        assert contexts == {"event-1"}  # notified where the caller's progress can be found
        # the place came from the server's queue for this request, with the queue's estimate
        assert lines[0].startswith("waiting: 1st in the queue, about ")
        assert lines[0].endswith(" to go")
        assert polled and len(set(polled)) == 1 and polled[0].startswith("/v1/queue/ui-")
        rid = polled[0].removeprefix("/v1/queue/")
        assert http.get(f"/v1/queue/{rid}").status_code == 404  # finished: not in the queue
        # the polling stopped with the request: no thread left, nothing notified after it
        notified, asked = len(lines), len(polled)
        assert not [t for t in threading.enumerate() if t.name == "gmts-queue-watch"]
        assert backend.analyze(given_body()) and (len(lines), len(polled)) == (notified, asked)
