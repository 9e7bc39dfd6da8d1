"""``scripts/under_load.sh``: the command runs beside the busy jobs, each job in a session of
its own, the command's exit status comes back, and no busy process outlives the command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.patience import PATIENCE_S

ROOT = Path(__file__).resolve().parents[1]

# run as the command: waits for the two busy processes this run started (their sessions' leaders
# are children of under_load.sh, the command's parent; not another run's on the machine), writes
# their pids and sessions, and exits with status 3
WATCH = """
import os, sys, time
sys.path.insert(0, sys.argv[3])
from tests.test_under_load import busy_pids
def parent_of(pid):
    return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])
def busy():
    found = {}
    for pid in busy_pids():
        try:
            sid = os.getsid(pid)
            if parent_of(sid) == os.getppid():
                found[pid] = sid
        except OSError:  # ended meanwhile
            pass
    return found
deadline = time.monotonic() + float(sys.argv[1])
while len(busy()) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
open(sys.argv[2], 'w').write(' '.join(f'{p}:{s}' for p, s in busy().items()))
sys.exit(3)
"""


def busy_pids() -> set[int]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd[-2:] == [b"while True: pass", b""]:
            found.add(int(pid))
    return found


def test_the_command_runs_beside_the_jobs_and_they_stop_with_it(tmp_path: Path) -> None:
    seen, log = tmp_path / "seen", tmp_path / "load.log"
    env = {**os.environ, "JOBS": "2", "PER_JOB": "1", "LOG": str(log)}
    cmd = [sys.executable, "-c", WATCH, str(PATIENCE_S), str(seen), str(ROOT)]
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "under_load.sh"), *cmd], env=env, timeout=PATIENCE_S
    )
    assert done.returncode == 3  # the command's own status
    pairs = [tuple(map(int, p.split(":"))) for p in seen.read_text().split()]
    assert len(pairs) == 2, pairs  # JOBS x PER_JOB busy processes while the command ran
    sessions = {sid for _, sid in pairs}
    assert len(sessions) == 2 and os.getsid(0) not in sessions  # a session per job, not ours
    started = {pid for pid, _ in pairs}
    deadline = time.monotonic() + PATIENCE_S  # signalled as the command ended: gone soon after
    while started & busy_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not started & busy_pids()
    text = log.read_text()
    assert "beside 2 jobs x 1 busy processes" in text and "exit 3 after" in text
