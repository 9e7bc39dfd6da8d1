"""The job queue (app.services.jobs): a waiting caller is notified of its place as the queue moves.

Driven by events only: each job holds its slot until the test releases it, and the test waits
for the place it expects to be notified of (the timeouts only stop a broken run from hanging)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable

import pytest

from app.services.errors import QueueFullError
from app.services.jobs import JOB_CLIENT, JobLimiter, wait_in_queue
from gmts_core.progress import Cancelled, CancelToken

WAIT = 30.0


class Caller:
    """A UI-like caller on its own thread: waits in the queue, then holds its slot till released."""

    def __init__(self, jobs: JobLimiter, token: CancelToken | None = None) -> None:
        self.places: list[int] = []
        self.heard = threading.Condition()
        self.release = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(jobs, token), daemon=True)

    def _on_position(self, place: int) -> None:
        with self.heard:
            self.places.append(place)
            self.heard.notify_all()

    def _run(self, jobs: JobLimiter, token: CancelToken | None) -> None:
        try:
            with wait_in_queue(WAIT, on_position=self._on_position):
                jobs.run_blocking(lambda: self.release.wait(WAIT), token)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> Caller:
        self.thread.start()
        return self

    def notified(self, place: int) -> None:
        """Wait until this caller has been notified of ``place``."""
        with self.heard:
            assert self.heard.wait_for(lambda: place in self.places, WAIT), self.places

    def done(self) -> None:
        self.thread.join(WAIT)
        assert not self.thread.is_alive()


def test_a_waiting_request_hears_its_place_go_2_1_running() -> None:
    jobs = JobLimiter(max_concurrent=1, max_queued=8)
    first = Caller(jobs).start()
    first.notified(0)  # running
    second = Caller(jobs).start()
    second.notified(1)
    third = Caller(jobs).start()
    third.notified(2)
    assert (jobs.running, jobs.waiting) == (1, 2)

    first.release.set()
    second.notified(0)
    third.notified(1)
    second.release.set()
    third.notified(0)
    third.release.set()
    for c in (first, second, third):
        c.done()
        assert c.error is None
    assert first.places == [0] and second.places == [1, 0] and third.places == [2, 1, 0]
    assert (jobs.running, jobs.waiting) == (0, 0)


def test_a_cancelled_job_ahead_moves_the_line_up() -> None:
    jobs = JobLimiter(max_concurrent=1, max_queued=8)
    first = Caller(jobs).start()
    first.notified(0)
    token = CancelToken()
    second = Caller(jobs, token).start()
    second.notified(1)
    third = Caller(jobs).start()
    third.notified(2)
    token.cancel("the tab was closed")
    third.notified(1)  # without the first job finishing
    second.done()
    assert isinstance(second.error, Cancelled) and jobs.dropped == 1
    first.release.set()
    third.notified(0)
    third.release.set()
    first.done()
    third.done()
    assert third.places == [2, 1, 0]


def test_waiting_for_queue_space_gives_up_by_the_injected_clock() -> None:
    """A full queue: a caller in the queue waits until its deadline (read from the clock), then
    gets the 429 error; the clock, not a sleep, decides."""
    now = [0.0]
    jobs = JobLimiter(max_concurrent=1, max_queued=0, clock=lambda: now[0])
    first = Caller(jobs).start()
    first.notified(0)
    notified: list[str] = []
    places: list[int] = []
    errors: list[BaseException] = []

    def queued(on_position: Callable[[int], None]) -> None:
        try:
            with wait_in_queue(10, notified.append, on_position):
                jobs.run_blocking(lambda: None)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    heard = threading.Event()
    waiter = threading.Thread(target=queued, args=(lambda p: (places.append(p), heard.set()),))
    waiter.start()
    assert heard.wait(WAIT)
    assert places == [1] and "waits in the queue" in notified[0]
    now[0] = 11.0  # past the deadline: the next wake-up gives up
    waiter.join(WAIT)
    assert len(errors) == 1 and "busy" in str(errors[0])
    first.release.set()
    first.done()


def test_a_client_at_its_cap_is_refused_at_once_while_others_get_in() -> None:
    """Two jobs of client "a" hold the queue's slot and one place (the cap is 2): a third of
    its own is a QueueFullError naming GMTS_MAX_JOBS_PER_CLIENT, while client "b" and a
    caller with no client (the UI's handlers) still get in; once a's jobs end it gets in."""
    jobs = JobLimiter(max_concurrent=1, max_queued=8, max_per_client=2)
    release = threading.Event()
    failed: list[BaseException] = []

    def hold(client: str | None) -> None:
        JOB_CLIENT.set(client)  # this thread's own context
        try:
            jobs.run_blocking(lambda: release.wait(WAIT))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    def as_client(client: str, fn: Callable[[], object]) -> object:
        def run() -> object:
            JOB_CLIENT.set(client)
            return fn()

        return contextvars.copy_context().run(run)

    def admitted(n: int) -> None:
        with jobs._changed:
            assert jobs._changed.wait_for(lambda: jobs._admitted == n, WAIT), jobs._admitted

    threads = [threading.Thread(target=hold, args=("a",), daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    admitted(2)
    with pytest.raises(QueueFullError, match="client has 2 heavy jobs.*GMTS_MAX_JOBS_PER_CLIENT"):
        as_client("a", lambda: jobs.run_blocking(lambda: None))
    for other in ("b", None):
        threads.append(threading.Thread(target=hold, args=(other,), daemon=True))
        threads[-1].start()
    admitted(4)
    release.set()
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    assert not failed, failed
    assert as_client("a", lambda: jobs.run_blocking(lambda: "in")) == "in"
    assert jobs._per_client == {}
