"""math-verify in helper processes that can be stopped from any thread.

math-verify bounds its own work with ``signal.alarm``, which only works in a process's main
thread (the server runs rewards in worker threads), and sympy can spend minutes, holding the
interpreter, on an input such as ``10^10^10^10``. So each check runs in a child process
(``python -m gmts_core.methods.math_worker``) that reads one JSON request per line on stdin and
writes one JSON reply per line on stdout. The caller waits at most ``timeout_s`` for the
reply; past it the child is killed (a new one starts on the next call) and
:class:`MathTimeoutError` is raised. Idle children are reused, one per concurrent caller.
Only JSON crosses the pipe.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from gmts_core.errors import InvalidInputError

STARTUP_TIMEOUT_S = 120.0  # importing sympy on a busy 2-core machine
MAX_IDLE_WORKERS = 4


class MathTimeoutError(TimeoutError):
    """A math-verify check passed its time limit (the child was stopped)."""


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gmts_core.methods.math_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # the child imports gmts_core from wherever this process found it
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _import_path()},
        )
        self._buffer = b""
        start = time.monotonic()
        try:
            ready = self._read_line(STARTUP_TIMEOUT_S)
        except MathTimeoutError:
            self.kill()
            raise InvalidInputError("the math-verify helper process could not start") from None
        self.startup_s = time.monotonic() - start
        if json.loads(ready).get("ready") is not True:
            self.kill()
            raise InvalidInputError(
                "the 'math' reward needs math-verify: pip install 'gmts-explorer[math]'"
            )

    def _read_line(self, timeout_s: float) -> bytes:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise MathTimeoutError(f"math-verify took longer than {timeout_s:g} s")
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise MathTimeoutError("the math-verify helper process ended")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = json.loads(self._read_line(timeout_s))
        return reply

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _import_path() -> str:
    # the folder that holds the gmts_core package (gmts_core/methods/math_worker.py: three up)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    entries = [package_root, *(p for p in sys.path if p)]
    return os.pathsep.join(dict.fromkeys(entries))


_idle: list[_Worker] = []
_lock = threading.Lock()


def verify_math(
    answer: str,
    reference: str,
    timeout_s: float,
    on_startup: Callable[[float], None] | None = None,
) -> tuple[bool, bool, str | None]:
    """``(found, correct, extracted)`` for ``answer`` against ``reference`` with math-verify;
    MathTimeoutError after ``timeout_s`` (start-up of a new helper not counted: its seconds go
    to ``on_startup``, e.g. so a reward budget does not charge them)."""
    if importlib.util.find_spec("math_verify") is None:
        raise InvalidInputError(
            "the 'math' reward needs math-verify: pip install 'gmts-explorer[math]'"
        )
    with _lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        if on_startup is not None:
            on_startup(worker.startup_s)
    try:
        reply = worker.call({"answer": answer, "reference": reference}, timeout_s)
    except (MathTimeoutError, OSError, ValueError):
        worker.kill()
        raise MathTimeoutError(f"math-verify took longer than {timeout_s:g} s") from None
    with _lock:
        if len(_idle) < MAX_IDLE_WORKERS:
            _idle.append(worker)
        else:
            worker.kill()
    return bool(reply.get("found")), bool(reply.get("correct")), reply.get("extracted")


def _check(answer: str, reference: str) -> dict[str, Any]:
    from math_verify import parse, verify  # the optional [math] extra, in the helper process

    # no signal-based timeouts: the parent bounds this process's time by killing it
    gold_text = reference if "$" in reference or "\\" in reference else f"${reference}$"
    gold = parse(gold_text, parsing_timeout=None)
    pred = parse(answer, parsing_timeout=None)
    if not pred:
        return {"found": False, "correct": False, "extracted": None}
    ok = bool(verify(gold, pred, timeout_seconds=None))
    return {"found": True, "correct": ok, "extracted": str(pred[-1])}


def main() -> None:
    """The child's loop: one JSON request per stdin line, one JSON reply per stdout line."""
    logging.disable(logging.WARNING)  # math-verify warns that its timeout is disabled
    try:
        import math_verify  # noqa: F401  the optional [math] extra: is it installed?
    except ImportError:
        print(json.dumps({"ready": False}), flush=True)
        return
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            reply = _check(str(request["answer"]), str(request["reference"]))
        except Exception as exc:  # a bad expression is "no answer", never a dead helper
            reply = {
                "found": False,
                "correct": False,
                "extracted": None,
                "error": type(exc).__name__,
            }
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
