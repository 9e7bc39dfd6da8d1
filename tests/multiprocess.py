"""Launching a test's two-process run (torch.distributed / accelerate) on this machine.

Each launch gets a port that is free now (not the launchers' fixed default 29500, which an
earlier run's socket may still hold), and a failed launch fails the test with the processes'
own output rather than a bare exit status. Each process ends its process group in order
(``tests/torchrun_entry.py``).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ENTRY = Path(__file__).with_name("torchrun_entry.py")  # the script, then the group's end


def torchrun(script: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
    """``python -m torch.distributed.run --nproc_per_node 2 script`` on a free port; each
    process runs ``script`` through :data:`ENTRY`, which ends its process group in order."""
    port = str(free_port())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    launch = ["--master_addr", "127.0.0.1", "--master_port", port, str(ENTRY), str(script)]
    run([*cmd, *launch], cwd, env)


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run ``cmd``; on a non-zero exit, fail with the tail of its stdout and stderr."""
    done = subprocess.run(cmd, cwd=cwd, env=env, timeout=600, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd[:6])} ... exited with {done.returncode}\n"
            f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-8000:]}"
        )
