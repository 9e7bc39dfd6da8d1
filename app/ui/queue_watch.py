"""The remote backend's place in the queue: a request's ``X-Request-ID`` polled at
``GET /v1/queue/{request_id}`` while the request is outstanding (see
:mod:`app.ui.remote_backend`)."""

from __future__ import annotations

import contextvars
import threading

import httpx

from app.ui.status import LiveStatus


class QueueWatch:
    """While a remote request is outstanding, asks ``GET path`` (``/v1/queue/{request_id}``) every
    ``poll_s`` seconds (a thread of its own) and notifies ``status`` the place and estimated wait
    each time they change, as the local backend's job queue does. The thread runs in a copy of
    the caller's context: Gradio's progress finds its event there. A 404 (the job not in the queue
    yet, or finished) and a failed poll are skipped: the request itself reports errors. Leaving
    the ``with`` stops the polling and waits for the thread (a poll waits at most
    ``POLL_TIMEOUT_S``), so nothing is notified after the request has finished."""

    POLL_TIMEOUT_S = 5.0

    def __init__(self, client: httpx.Client, path: str, status: LiveStatus, poll_s: float) -> None:
        self.client, self.path, self.status, self.poll_s = client, path, status, poll_s
        self.done = threading.Event()
        context = contextvars.copy_context()
        self.thread = threading.Thread(
            target=context.run, args=(self._watch,), name="gmts-queue-watch", daemon=True
        )

    def __enter__(self) -> QueueWatch:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _watch(self) -> None:
        notified: tuple[int, float | None] | None = None
        while not self.done.wait(self.poll_s):
            try:
                resp = self.client.get(self.path, timeout=self.POLL_TIMEOUT_S)
                data = resp.json() if resp.status_code == 200 else None
                place = int(data["place"]) if isinstance(data, dict) else None
                wait = data.get("estimated_wait_s") if isinstance(data, dict) else None
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                continue
            if place is None or self.done.is_set():
                continue
            estimate = float(wait) if isinstance(wait, int | float) else None
            if (place, estimate) != notified:
                notified = (place, estimate)
                self.status.position(place, estimate)
