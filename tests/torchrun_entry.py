"""What ``tests.multiprocess.torchrun`` launches on each process: the test's script, then the
process group's orderly end.

A script that leaves its process group to interpreter exit can abort there ("terminate called
without an active exception", SIGABRT) when the other rank has already gone: gloo's threads
are torn down while still joinable. Seen under load, after the script's work had succeeded,
and seen again (1 of 3 loaded suite runs) after the orderly end below, where the script had
already ended its group itself. So once the script has succeeded, its outputs are flushed
(stdio, logging) and the process leaves without the interpreter's teardown (``os._exit``), the
C++ destructors that abort included; a script that fails still exits as it would.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys

import torch.distributed as dist

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]  # the script sees its own argv, and its folder first on the path,
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # not tests/ (tests/multiprocess.py)
    runpy.run_path(script, run_name="__main__")
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # neither rank leaves while the other still talks to it
        dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
