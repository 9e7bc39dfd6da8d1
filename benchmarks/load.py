"""Bounded load test: 16 concurrent clients against a real server on 127.0.0.1.

A uvicorn server of ``create_app`` runs in this process on a free port of 127.0.0.1 (never
another interface), with ``--max-concurrent-jobs`` heavy jobs at once and a queue sized for
every client, so a well-behaved server answers every request (a 429 counts as an error).
``--clients`` threads (httpx) share ``--requests`` ``POST /v1/analyze`` calls on the bundled
model: given answers and small sampled groups, alternately. The first ``--sessions`` clients
each own a live-RL session and, between their analyses, run ``--steps-per-session`` GRPO steps
on it and analyze with its policy (``session_id``).

Figures: errors by status, p50/p95/max latency per kind, throughput, wall time. Checks, after
the load: each session's history holds exactly its own steps (1..n, n = its owner's steps);
every session's weights differ from every other's and from the base model; the base model's
checksum (SHA-256 of every tensor) is unchanged, and a fixed probe request gives bit-identical
numbers before and after. The run is bounded by ``--max-seconds``.

``--disconnect-share 0.5`` makes every client abandon half of its analyze requests: it sends
the request and closes the connection ``--abandon-after-s`` later, without reading the answer.
Those requests are not expected to succeed; instead, after the run, the queue must drain
(nothing running or waiting) and the report counts the jobs dropped from the queue and stopped
while running: no work is left for clients that are gone.

    .venv/bin/python benchmarks/load.py                 # 16 clients, 400 analyses, ~2-4 min
    .venv/bin/python benchmarks/load.py --json
    .venv/bin/python benchmarks/load.py --disconnect-share 0.5     # half the requests abandoned
    .venv/bin/python benchmarks/load.py --clients 4 --requests 20 --sessions 2 --steps-per-session 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import torch
from _common import LiveServer, emit, machine, percentile

from app.core.config import Settings
from app.main import create_app
from gmts_core.grpo.policy import weights_checksum

PROBE = {
    "prompt": "Q: 47+38=?\nA:",
    "answers": [" 7+8=15, write 5 carry 1. 4+3+1=8. Answer: 85", " Answer: 75"],
    "reward": {"kind": "numeric", "reference": "85"},
    "top_alternatives": 2,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=400, help="analyze requests in total")
    p.add_argument("--sessions", type=int, default=3, help="live-RL sessions, one client each")
    p.add_argument("--steps-per-session", type=int, default=4)
    p.add_argument(
        "--step-new-tokens", type=int, default=32, help="session answers' max_new_tokens"
    )
    p.add_argument("--num-samples", type=int, default=4, help="answers of a sampled analysis")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-concurrent-jobs", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--max-seconds", type=float, default=600, help="stop sending after this")
    p.add_argument(
        "--disconnect-share",
        type=float,
        default=0.0,
        help="share of each client's analyze requests it abandons (0.5: every other one)",
    )
    p.add_argument("--abandon-after-s", type=float, default=0.3)
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p.parse_args(argv)


def server_settings(args: argparse.Namespace) -> Settings:
    """Limits that admit the whole load: a queue slot for every client, room for the sessions."""
    return Settings(
        ui_enabled=False,
        torch_threads=args.threads,
        max_concurrent_jobs=args.max_concurrent_jobs,
        max_queued_jobs=args.clients + 4,
        max_sessions=args.sessions + 1,
        max_new_tokens=max(args.max_new_tokens, args.step_new_tokens),
        session_ttl_s=3600,
    )


def analyze_body(i: int, args: argparse.Namespace) -> dict[str, Any]:
    """Request ``i``: given answers (even i) or a small sampled group (odd i)."""
    if i % 2 == 0:
        return PROBE
    a, b = 10 + i % 80, 10 + (7 * i) % 80
    return {
        "prompt": f"Q: {a}+{b}=?\nA:",
        "num_samples": args.num_samples,
        "max_new_tokens": args.max_new_tokens,
        "seed": i,
        "reward": {"kind": "numeric", "reference": str(a + b)},
        "top_alternatives": 2,
    }


@dataclass
class Tally:
    """What the clients saw (appended under a lock)."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {"analyze": [], "step": []})
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    steps_ok: dict[str, int] = field(default_factory=dict)
    abandoned: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, r: httpx.Response | None, seconds: float, what: str) -> bool:
        ok = r is not None and r.status_code < 400
        with self.lock:
            self.statuses[f"{kind} {r.status_code if r is not None else 'exception'}"] += 1
            if ok:
                self.latencies[kind].append(seconds)
            elif len(self.errors) < 20:
                detail = r.text[:300] if r is not None else what
                self.errors.append(f"{kind}: {detail}")
        return ok


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> tuple[httpx.Response | None, str]:
    try:
        return http.post(path, json=body), ""
    except httpx.HTTPError as exc:
        return None, repr(exc)


class Client(threading.Thread):
    """One client: takes analyze requests from the shared counter; a session owner also steps."""

    def __init__(
        self, url: str, args: argparse.Namespace, work: Any, tally: Tally, sid: str | None
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.args, self.work, self.tally, self.sid = url, args, work, tally, sid
        self.deadline = time.monotonic() + args.max_seconds

    def run(self) -> None:
        steps_left = self.args.steps_per_session if self.sid else 0
        with httpx.Client(base_url=self.url, timeout=600) as http:
            while time.monotonic() < self.deadline:
                if steps_left:
                    self._step(http)
                    steps_left -= 1
                i = next(self.work)
                if i >= self.args.requests:
                    if not steps_left:
                        return
                    continue
                body = analyze_body(i, self.args)
                if self.sid and i % 2 == 0:  # the owner analyzes with its session's policy
                    body = {**body, "session_id": self.sid}
                if self._abandons(i):
                    _abandon(self.url, body, self.args.abandon_after_s)
                    with self.tally.lock:
                        self.tally.abandoned += 1
                    continue
                start = time.perf_counter()
                r, what = _post(http, "/v1/analyze", body)
                self.tally.record("analyze", r, time.perf_counter() - start, what)

    def _abandons(self, i: int) -> bool:
        share = self.args.disconnect_share
        return share > 0 and int((i + 1) * share) != int(i * share)

    def _step(self, http: httpx.Client) -> None:
        start = time.perf_counter()
        r, what = _post(http, f"/v1/sessions/{self.sid}/step", {"include_tokens": False})
        if self.tally.record("step", r, time.perf_counter() - start, what):
            assert self.sid is not None
            with self.tally.lock:
                self.tally.steps_ok[self.sid] = self.tally.steps_ok.get(self.sid, 0) + 1


def _abandon(url: str, body: dict[str, Any], after_s: float) -> None:
    """Send a request, wait ``after_s`` (no reading of the answer) and hang up."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST /v1/analyze HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        threading.Event().wait(after_s)


def drain(app: Any, limit_s: float = 120.0) -> dict[str, Any]:
    """Wait until no job runs or waits; how long that took and what was cancelled."""
    jobs = app.state.services.jobs
    start = time.perf_counter()
    while (jobs.running or jobs.waiting) and time.perf_counter() - start < limit_s:
        time.sleep(0.05)
    return {
        "drained": jobs.running == 0 and jobs.waiting == 0,
        "drain_s": time.perf_counter() - start,
        "left_running": jobs.running,
        "left_waiting": jobs.waiting,
        "dropped_from_queue": jobs.dropped,
        "stopped_while_running": jobs.stopped,
    }


def create_sessions(http: httpx.Client, n: int, args: argparse.Namespace) -> list[str]:
    ids = []
    for seed in range(n):
        body = {  # long enough for the demo's answers (~25 tokens), else every reward is 0
            "seed": seed,
            "group_size": 8,
            "prompts_per_step": 2,
            "max_new_tokens": args.step_new_tokens,
            "learning_rate": 0.003,
        }
        r = http.post("/v1/sessions", json=body)
        r.raise_for_status()
        ids.append(r.json()["session_id"])
    return ids


def _probe_numbers(http: httpx.Client) -> list[list[float]]:
    r = http.post("/v1/analyze", json=PROBE)
    r.raise_for_status()
    return [[t["logprob"] for t in a["tokens"]] for a in r.json()["answers"]]


def isolation_checks(app: Any, http: httpx.Client, ids: list[str], tally: Tally) -> dict[str, Any]:
    """Histories hold exactly their own steps; trained sessions' weights all differ; the base
    is untouched. (A session whose every batch had equal rewards has no gradient and keeps the
    base weights: it counts as untrained, which is not a failure.)"""
    histories = {}
    for sid in ids:
        info = http.get(f"/v1/sessions/{sid}").json()
        histories[sid] = [h["step"] for h in info["history"]]
    own_steps = all(histories[s] == list(range(1, tally.steps_ok.get(s, 0) + 1)) for s in ids)
    store = app.state.services.sessions.store
    sums = [store.get(s).policy.checksum() for s in ids]
    trained = [c for c in sums if c != app.state.base_checksum]
    return {
        "histories_hold_exactly_own_steps": own_steps,
        "steps_per_session": [len(histories[s]) for s in ids],
        "sessions_trained": len(trained),
        "trained_session_weights_all_distinct": len(set(trained)) == len(trained),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    app = create_app(server_settings(args))
    base = app.state.services.models.get("tiny-arith")
    app.state.base_checksum = weights_checksum(base.model)
    tally = Tally()
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=600) as http:
        probe_before = _probe_numbers(http)
        ids = create_sessions(http, args.sessions, args)
        owners = ids + [None] * max(args.clients - len(ids), 0)
        work = itertools.count()  # thread-safe enough: next() on a count is atomic in CPython
        clients = [Client(server.url, args, work, tally, sid) for sid in owners[: args.clients]]
        start = time.perf_counter()
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        wall = time.perf_counter() - start
        drained = drain(app)
        checks = isolation_checks(app, http, ids, tally)
        checks["base_probe_bit_identical"] = _probe_numbers(http) == probe_before
    checks["base_checksum_unchanged"] = weights_checksum(base.model) == app.state.base_checksum
    checks["queue_drained"] = drained["drained"]
    rep = report(args, tally, wall, checks)
    rep["disconnects"] = {"abandoned_requests": tally.abandoned, **drained}
    return rep


def _latency(values: list[float]) -> dict[str, float | int]:
    return {
        "count": len(values),
        "p50_s": percentile(values, 0.5),
        "p95_s": percentile(values, 0.95),
        "max_s": max(values, default=float("nan")),
    }


def report(
    args: argparse.Namespace, tally: Tally, wall: float, checks: dict[str, Any]
) -> dict[str, Any]:
    errors = sum(n for k, n in tally.statuses.items() if not k.split()[1].startswith("2"))
    done = sum(len(v) for v in tally.latencies.values())
    everything = tally.latencies["analyze"] + tally.latencies["step"]
    return {
        "benchmark": "load",
        "clients": args.clients,
        "analyze_requests": args.requests,
        "sessions": args.sessions,
        "steps_per_session": args.steps_per_session,
        "max_concurrent_jobs": args.max_concurrent_jobs,
        "wall_s": wall,
        "throughput_rps": done / wall if wall else float("nan"),
        "errors": errors,
        "zero_errors": errors == 0
        and len(tally.latencies["analyze"]) == args.requests - tally.abandoned,
        "statuses": dict(tally.statuses),
        "error_samples": tally.errors,
        "latency": {
            "all": _latency(everything),
            "analyze": _latency(tally.latencies["analyze"]),
            "step": _latency(tally.latencies["step"]),
        },
        "isolation": checks,
        "isolated": all(v for k, v in checks.items() if isinstance(v, bool)),
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rep = run(args)
    lat = rep["latency"]
    lines = [
        f"{args.clients} clients, {args.requests} analyses + {args.sessions} sessions x "
        f"{args.steps_per_session} steps, {args.max_concurrent_jobs} concurrent jobs, "
        f"load {rep['machine']['load_average_1m']}: {rep['wall_s']:.1f} s, "
        f"{rep['throughput_rps']:.2f} req/s",
        f"  errors {rep['errors']} {rep['statuses']}",
        *(
            f"  {kind:8s} n={v['count']:4d}  p50 {v['p50_s']:.3f} s  p95 {v['p95_s']:.3f} s  "
            f"max {v['max_s']:.3f} s"
            for kind, v in lat.items()
        ),
        f"  isolation: {rep['isolation']}",
        f"  disconnects: {rep['disconnects']}",
        *(f"  error: {e}" for e in rep["error_samples"]),
    ]
    emit(rep, args.json, lines)
    return 0 if rep["zero_errors"] and rep["isolated"] else 1


if __name__ == "__main__":
    sys.exit(main())
