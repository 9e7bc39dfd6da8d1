"""A classroom at once: N students on one server, each following the UI's own calls.

Every simulated student uses the UI's client (``app.ui.remote_backend.RemoteBackend``, what the UI
runs in remote mode; it waits in the queue on a busy server instead of showing a 429) with the
UI's default forms: create a session (Train tab), run ``--steps`` one-step requests, and
``--analyses`` analyses of a demo prompt (Explore tab, 8 sampled answers). Against one
``gmts serve``-like server on the bundled ``tiny-arith`` with the default limits (sessions
capped by memory, ``GMTS_MAX_SESSIONS``), it reports errors, evicted sessions, the time per
call (p50/p95) split into the *wait* (in the server's line, and retrying a 429) and the *work*
(the server's ``X-Work-S``: model work of the call's jobs), and the total time.

    python benchmarks/classroom.py            # 30 students, 5 steps and 3 analyses each
    python benchmarks/classroom.py --json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import LiveServer, emit, machine, median, percentile  # noqa: E402

from app.core.config import Settings  # noqa: E402
from app.main import create_app  # noqa: E402
from app.ui.remote_backend import RemoteBackend
from app.ui.tabs.explore.view import ExploreForm, build_request  # noqa: E402
from app.ui.tabs.train.view import TrainForm  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--students", type=int, default=30)
    p.add_argument("--steps", type=int, default=5, help="Train-tab step requests per student")
    p.add_argument("--analyses", type=int, default=3, help="Explore-tab analyses per student")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p.parse_args(argv)


class Student(threading.Thread):
    def __init__(self, i: int, url: str, args: argparse.Namespace, out: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.i, self.args, self.out = i, args, out
        self.backend = RemoteBackend(url, on_wait=lambda _msg: self.told.append(1))
        self.told: list[int] = []
        self.calls: list[float] = []  # seconds per call, as the student sees it
        self.works: list[float] = []  # of which the server worked (X-Work-S)
        self.errors: list[str] = []
        self._work = 0.0
        self.backend._client.event_hooks["response"].append(self._count_work)

    def _count_work(self, response: Any) -> None:
        self._work += float(response.headers.get("x-work-s", 0.0))

    def _timed(self, fn: Any) -> Any:
        start = time.perf_counter()
        self._work = 0.0
        try:
            return fn()
        except Exception as exc:  # a benchmark counts failures instead of stopping
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return None
        finally:
            self.calls.append(time.perf_counter() - start)
            self.works.append(self._work)

    def run(self) -> None:
        form = TrainForm(seed=self.i)
        session = self._timed(lambda: self.backend.create_session(form.create_request()))
        if session is not None:
            sid = session.session_id
            for _ in range(self.args.steps):
                self._timed(lambda: self.backend.step_session(sid, form.step_request()))
            info = self._timed(lambda: self.backend.get_session(sid))
            self.out.setdefault("steps_done", []).append(info.steps_done if info else 0)
        for k in range(self.args.analyses):
            a, b = 10 + (self.i + k) % 80, 10 + (3 * self.i + k) % 80
            explore = ExploreForm(
                prompt=f"Q: {a}+{b}=?\nA:", reference=str(a + b), seed=self.i * 10 + k
            )
            self._timed(lambda f=explore: self.backend.analyze(build_request(f)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="gmts-classroom-"))  # sessions saved as on a server
    settings = Settings(torch_threads=args.threads, ui_enabled=False, session_state_dir=state)
    app = create_app(settings)
    out: dict[str, Any] = {}
    with LiveServer(app) as server:
        students = [Student(i, server.url, args, out) for i in range(args.students)]
        start = time.perf_counter()
        for s in students:
            s.start()
        for s in students:
            s.join()
        total = time.perf_counter() - start
        store = app.state.services.sessions.store
        evicted = store.evicted
        live = len(store)
        memory_mb = sum(s.memory_bytes() for s in store._sessions.values()) / 2**20
    calls = [c for s in students for c in s.calls]
    works = [w for s in students for w in s.works]
    waits = [max(c - w, 0.0) for c, w in zip(calls, works, strict=True)]
    errors = [e for s in students for e in s.errors]
    return {
        "benchmark": "classroom",
        "students": args.students,
        "steps_per_student": args.steps,
        "analyses_per_student": args.analyses,
        "calls": len(calls),
        "errors": len(errors),
        "error_examples": errors[:3],
        "evicted_sessions": evicted,
        "live_sessions": live,
        "sessions_memory_mb": round(memory_mb, 1),
        "steps_done_min": min(out.get("steps_done", [0])),
        "students_told_to_wait": sum(1 for s in students if s.told),
        "call_p50_s": round(median(calls), 2),
        "call_p95_s": round(percentile(calls, 0.95), 2),
        "call_max_s": round(max(calls), 2),
        "wait_p50_s": round(median(waits), 2),
        "wait_p95_s": round(percentile(waits, 0.95), 2),
        "wait_max_s": round(max(waits), 2),
        "work_p50_s": round(median(works), 2),
        "work_p95_s": round(percentile(works, 0.95), 2),
        "total_s": round(total, 1),
        "max_sessions": settings.max_sessions,
        "session_memory_mb": settings.session_memory_mb,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    r = run(args)
    lines = [
        f"{r['students']} students x ({r['steps_per_student']} steps + "
        f"{r['analyses_per_student']} analyses): {r['calls']} calls in {r['total_s']} s",
        f"errors {r['errors']}, evicted sessions {r['evicted_sessions']} "
        f"({r['live_sessions']} live, {r['sessions_memory_mb']} MB), "
        f"{r['students_told_to_wait']} students told to wait in the queue",
        f"time per call: p50 {r['call_p50_s']} s, p95 {r['call_p95_s']} s, max {r['call_max_s']} s",
        f"  waiting:     p50 {r['wait_p50_s']} s, p95 {r['wait_p95_s']} s, max {r['wait_max_s']} s",
        f"  working:     p50 {r['work_p50_s']} s, p95 {r['work_p95_s']} s",
    ]
    emit(r, args.json, lines)
    return 0 if r["errors"] == 0 and r["evicted_sessions"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
