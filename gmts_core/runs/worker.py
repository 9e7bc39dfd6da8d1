"""Run files read in worker processes under hard limits, so a hostile file cannot hurt the
caller (the server).

Each worker is a child process (``python -m gmts_core.runs.worker``) that reads one JSON
request per stdin line and writes one JSON reply per stdout line, like the math-verify helper
(:mod:`gmts_core.methods.math_worker`). Before it imports a reader it limits itself: address
space (``RLIMIT_AS``), open files (``RLIMIT_NOFILE``); before each request, CPU seconds
(``RLIMIT_CPU``, counted from what it used so far). The caller waits at most the wall-time
limit for the reply (checking its cancel token meanwhile); a worker past any limit, or that
the caller stops, is killed and replaced, and the caller gets :class:`RunWorkerLimitError`
naming the limit and its setting (or :class:`~gmts_core.progress.Cancelled`). Only JSON crosses
the pipe, and a reply is read only up to the step's byte budget: the caller never holds more
of a file's decoded content than one step.

:class:`ReaderPool` holds at most ``size`` workers, started off the requests' clock where it
can be: in advance (:meth:`ReaderPool.prestart`, e.g. when a server finds runs to read) and, when
one retires, its successor at once, in the background. A preload entry ``module:function``
runs a warm-up (the first call's one-time costs) before a worker says it is ready.
:meth:`ReaderPool.open_run` returns a
:class:`~gmts_core.runs.registry.Run` whose index was built in a worker and whose steps are
loaded by one.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gmts_core.errors import GMTSError, InvalidInputError, LimitExceededError
from gmts_core.progress import Cancelled, current_token
from gmts_core.runs.base import RunStep, StepRef
from gmts_core.runs.limits import RunLimits
from gmts_core.runs.trainer_metrics import TrainerMetrics, find_trainer_metrics
from gmts_core.runs.wire import (
    dumps,
    error_in,
    error_out,
    limits_out,
    loads,
    ref_in,
    ref_out,
    step_in,
    step_out,
)

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 60.0  # importing pyarrow on a busy 2-core machine
POLL_S = 0.1  # how often a waiting caller looks at its cancel token
REPLY_SLACK_BYTES = 1 << 20  # a reply's framing beyond the step's own bytes


class RunWorkerLimitError(LimitExceededError):
    """A run-file reading passed a worker limit (memory, CPU, wall time); the worker was
    killed and replaced. The message names the limit and the setting that raises it."""

    code = "run_worker_limit"

    def __init__(self, what: str, setting: str, where: str) -> None:
        self.setting = setting
        super().__init__(f"{where}: reading it {what} (raise it with {setting})")


@dataclass(frozen=True)
class WorkerLimits:
    """The hard limits of one reading process (the server's ``GMTS_RUN_WORKER_*``)."""

    memory_mb: int = 4096
    cpu_s: int = 60
    wall_s: float = 60.0
    open_files: int = 64
    # what the process does before it says it is ready (not on a request's clock): modules
    # imported, and "module:function" entries, that function called once (a warm-up)
    preload: tuple[str, ...] = ()
    # niceness added to the server's: a lane of processes that yields the CPU to another
    nice: int = 0
    # resident past this after a reading, a worker exits (a large file's heap is not given
    # back) and its successor starts in the background. Above the working set of run-wide
    # queries on a 1M-rollout analysed run (440-510 MB, growing slowly), which at 512 MB made
    # one search in about five pay for a fresh process (3.5 s instead of 0.8 s)
    retire_mb: int = 1024


# --- the parent's side (what crosses the pipe: gmts_core.runs.wire) ---


class _Worker:
    def __init__(self, limits: WorkerLimits) -> None:
        self.limits = limits
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gmts_core.runs.worker",
                str(limits.memory_mb),
                str(limits.open_files),
                str(limits.retire_mb),
                *limits.preload,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_child_env(),
            cwd="/",
        )
        if limits.nice:  # raising one's own child's niceness needs no privilege
            mine = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, min(19, mine + limits.nice))
        self._buffer = b""
        ready = self._read_line(STARTUP_TIMEOUT_S, 4096, "the run-file reader")
        if json.loads(ready).get("ready") is not True:
            self.kill()
            raise InvalidInputError("the run-file reading process could not start")

    def _read_line(self, timeout_s: float, cap: int, where: str) -> bytes:
        """One reply line, waiting at most ``timeout_s``; stopped (the worker killed) when
        the caller's token is cancelled, the reply passes ``cap`` bytes or the worker dies."""
        assert self.proc.stdout is not None
        token = current_token()
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            if token is not None and token.cancelled:
                self.kill()
                token.raise_if_cancelled()
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RunWorkerLimitError(
                    f"took longer than {timeout_s:g} s", "GMTS_RUN_WORKER_WALL_S", where
                )
            readable, _, _ = select.select([fd], [], [], min(left, POLL_S))
            if readable:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise self._died(where)
                self._buffer += chunk
                if len(self._buffer) > cap:
                    self.kill()
                    raise RunWorkerLimitError(
                        f"gave a reply over {cap:,} bytes", "GMTS_RUN_MAX_STEP_BYTES", where
                    )
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _died(self, where: str) -> RunWorkerLimitError:
        code = self.proc.wait()
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            what = f"used more than {self.limits.cpu_s} CPU seconds"
            return RunWorkerLimitError(what, "GMTS_RUN_WORKER_CPU_S", where)
        what = f"ended the reading process (exit status {code})"
        return RunWorkerLimitError(what, "GMTS_RUN_WORKER_MEMORY_MB", where)

    def call(self, request: dict[str, Any], cap: int, where: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        reply: dict[str, Any] = loads(self._read_line(self.limits.wall_s, cap, where))
        if "memory" in reply:  # MemoryError in the child: it exits, a new one is started
            self.kill()
            what = f"needed more than {self.limits.memory_mb} MB"
            raise RunWorkerLimitError(what, "GMTS_RUN_WORKER_MEMORY_MB", where)
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


# the only variables a reading process gets: never the server's keys or settings
_CHILD_VARS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "HOME", "VIRTUAL_ENV")


def _child_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in _CHILD_VARS if k in os.environ}
    return {**env, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _import_path()}


def _import_path() -> str:
    # the folder that holds the gmts_core package (gmts_core/runs/worker.py: three up)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.pathsep.join(dict.fromkeys([package_root, *(p for p in sys.path if p)]))


class ReaderPool:
    """At most ``size`` reading processes; a caller waits for a free one (the job queue
    bounds how many wait). ``killed`` counts the workers stopped at a limit or a cancel."""

    def __init__(self, size: int, limits: WorkerLimits) -> None:
        self.limits = limits
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)  # notified when these counts change
        self.killed = 0
        self.started = 0
        self.reading: dict[str, int] = {}  # requests a worker is answering now, by op
        self._starting = False  # a worker being started in the background (prestart)
        self._closed = False

    def prestart(self) -> None:
        """Start one worker in the background, so the next request does not start one on its
        clock (the pool's first, or the successor of one that retired); none when an idle
        one is waiting or one is being started. A failed start is logged; a request then
        starts its own (and reports why it cannot)."""
        with self._lock:
            if self._idle or self._starting:
                return
            self._starting = True
        threading.Thread(target=self._start_idle, name="reader-prestart", daemon=True).start()

    def _start_idle(self) -> None:
        worker = None
        try:
            worker = _Worker(self.limits)
        except Exception as exc:  # any failure: logged, and a request starts its own
            logger.warning("a run-file reading process could not start: %s", exc)
        finally:  # never left "starting": a request waiting for it would wait forever
            with self._lock:
                self._starting = False
                if worker is not None:
                    self.started += 1
                    if self._closed:
                        worker.kill()
                    else:
                        self._idle.append(worker)
                self.changed.notify_all()

    def _take(self) -> _Worker:
        """An idle worker (waiting for one being started in the background, the caller's
        cancel token checked meanwhile), or a new one."""
        token = current_token()
        with self.changed:
            while self._starting and not self._idle:
                if token is not None:
                    token.raise_if_cancelled()
                self.changed.wait(POLL_S)
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    return worker
        worker = _Worker(self.limits)
        with self._lock:
            self.started += 1
        return worker

    def call(self, request: dict[str, Any], cap: int, where: str) -> dict[str, Any]:
        """One request answered by a worker: its reply, or the child's error raised here."""
        self._slots.acquire()
        try:
            worker = self._take()
            self._count(request["op"], 1)
            try:
                reply = worker.call({**request, "cpu_s": self.limits.cpu_s}, cap, where)
            except (GMTSError, Cancelled, OSError, ValueError) as exc:
                worker.kill()
                with self._lock:
                    self.killed += 1
                if isinstance(exc, (OSError, ValueError)) and not isinstance(exc, GMTSError):
                    raise worker._died(where) from None
                raise
            finally:
                self._count(request["op"], -1)
            retired = reply.pop("retire", False)
            if retired:  # it grew past retire_mb: its successor starts now, off any clock
                worker.kill()
            else:
                with self._lock:
                    self._idle.append(worker)
        finally:
            self._slots.release()
        if retired:
            self.prestart()
        if "trace" in reply:  # a reader's own bug: the maintainers get the traceback
            logger.error("a run reader failed on %s:\n%s", where, reply["trace"])
        if "error" in reply:
            raise error_in(reply["error"])
        return reply

    def _count(self, op: str, change: int) -> None:
        with self.changed:
            self.reading[op] = self.reading.get(op, 0) + change
            self.changed.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    def open_run(self, path: Path, limits: RunLimits, fmt: str | None = None) -> Any:
        """:func:`~gmts_core.runs.registry.open_run` in a worker: the run's format and index
        from the child, its steps loaded by a child when asked for."""
        from gmts_core.runs.registry import READERS, Run

        request = {"op": "open", "path": str(path), "format": fmt, "limits": limits_out(limits)}
        cap = REPLY_SLACK_BYTES + 64 * limits.max_run_steps
        reply = self.call(request, cap, str(path))
        refs = [ref_in(r) for r in reply["refs"]]
        return Run(path, READERS.get(reply["format"]), refs, limits, loader=self._loader)

    def trainer_metrics(self, path: Path, limits: RunLimits) -> Any:
        """:func:`~gmts_core.runs.trainer_metrics.find_trainer_metrics` in a worker: the
        trainer's own metrics logged in the run at ``path`` (or None)."""
        request = {"op": "metrics", "path": str(path), "limits": limits_out(limits)}
        # a reply holds at most MAX_POINTS steps of the standard series and MAX_NAMES names
        # of at most MAX_NAME_CHARS characters each
        reply = self.call(request, REPLY_SLACK_BYTES + 4 * (1 << 20), str(path))
        found = reply["metrics"]
        return None if found is None else TrainerMetrics(**found)

    def _loader(self, run: Any, ref: StepRef) -> RunStep:
        request = {
            "op": "load",
            "format": run.format,
            "ref": ref_out(ref),
            "limits": limits_out(run.limits),
        }
        # a step's reply: its texts (at most max_step_bytes of file) and their JSON framing
        cap = REPLY_SLACK_BYTES + 2 * run.limits.max_step_bytes
        return step_in(self.call(request, cap, str(ref.path))["step"])


# --- the child's side ---


def _limit_self(memory_mb: int, open_files: int) -> None:
    memory = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        open_files = min(open_files, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))


def _cpu_budget(cpu_s: int) -> None:
    """This request may use ``cpu_s`` CPU seconds more than the process used so far."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    so_far = math.ceil(used.ru_utime + used.ru_stime)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = so_far + cpu_s
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    from gmts_core.runs.base import check_step
    from gmts_core.runs.registry import READERS, open_run

    if request["op"] == "analysed":
        return _analysed(request)
    limits = replace(RunLimits(), **request["limits"])
    if request["op"] == "open":
        run = open_run(request["path"], request.get("format"), limits)
        return {"format": run.format, "refs": [ref_out(r) for r in run.refs]}
    if request["op"] == "metrics":
        found = find_trainer_metrics(Path(request["path"]), limits)
        return {"metrics": None if found is None else found.to_dict()}
    if request["op"] == "load":
        reader = READERS.get(request["format"])
        step = check_step(reader.load(ref_in(request["ref"]), limits), limits)
        return {"step": step_out(step)}
    raise InvalidInputError(f"unknown request {request['op']!r}")


def _analysed(request: dict[str, Any]) -> dict[str, Any]:
    """One query of an analysed-run dataset (gmts_core.run_dataset.requests)."""
    from gmts_core.run_dataset.query import QueryLimits
    from gmts_core.run_dataset.requests import answer

    query = QueryLimits(**request["query_limits"])
    if query.temp_dir:  # this process's own spill folder (removed once it is gone)
        folder = os.path.join(query.temp_dir, str(os.getpid()))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        query = replace(query, temp_dir=folder)
    return answer(request["root"], request["name"], request["query"], request["params"], query)


def main() -> None:
    """The child's loop: limit itself, then one JSON request per line, one reply per line."""
    memory_mb, open_files, retire_mb = (int(v) for v in sys.argv[1:4])
    _limit_self(memory_mb, open_files)
    logging.disable(logging.WARNING)
    import gmts_core.runs  # noqa: F401  registers the readers (under the limits already)

    for entry in sys.argv[4:]:  # what this pool's requests need, before the first arrives
        module, _, function = entry.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()

    print(json.dumps({"ready": True}), flush=True)
    out = sys.stdout.buffer
    for line in sys.stdin:
        request: Any = None
        try:
            request = json.loads(line)
            _cpu_budget(int(request.get("cpu_s", 60)))
            reply = _handle(request)
            data = dumps(reply)
        except MemoryError:
            out.write(b'{"memory": true}\n')
            out.flush()
            return  # the parent replaces this process
        except GMTSError as exc:
            data = json.dumps({"error": error_out(exc)}, default=str).encode()
        except Exception as exc:  # a reader's bug is one refused file, never a dead loop
            where = _where(request)
            message = f"{where}: cannot be read (an internal error: {type(exc).__name__})"
            # the traceback goes to the caller's log (never to the user): a bug is visible
            trace = traceback.format_exc(limit=30)[-20_000:]
            error = {"error": {"code": "run_format", "message": message}, "trace": trace}
            data = json.dumps(error).encode()
        retire = _rss_mb() > retire_mb
        if retire:  # a large file's heap is not given back: hand over to a fresh process
            data = data[:-1] + b',"retire":true}' if data.endswith(b"}") else data
        out.write(data + b"\n")
        out.flush()
        if retire:
            return


def _where(request: Any) -> str:
    """What a request was reading, for a message (never more than a name or a path)."""
    if not isinstance(request, dict):
        return "a run file"
    if request.get("op") == "analysed":
        return str(request.get("name", "an analysed run"))
    ref = request.get("ref")
    return str(request.get("path") or (ref[1] if isinstance(ref, list) and ref else "a run file"))


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return 0.0


if __name__ == "__main__":
    main()
