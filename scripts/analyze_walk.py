"""The analyze request's walk: the project's functions on the way from the route to the model.

Sends ``POST /v1/analyze`` twice to an in-process app (the bundled model; the first request
loads it, the second runs the sampler's one-time probe; both are warm-ups): once with given
answers, once with sampled ones. For each, it prints the chain of
the project's own frames (``app/`` and ``gmts_core/``) on the stack when the model's forward
runs, the longest such chain, with the event loop's part (the route up to the job queue) joined
to the job thread's part. ARCHITECTURE.md draws the result.

    .venv/bin/python scripts/analyze_walk.py
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import FrameType

import torch
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.main import create_app
from app.services.jobs import JobLimiter

ROOT = str(Path(__file__).resolve().parents[1]) + "/"
OWN = (ROOT + "app/", ROOT + "gmts_core/")


def own_frames(frame: FrameType | None) -> list[str]:
    """``file:function`` of the project's frames on the stack, outermost first."""
    out = []
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(OWN):
            out.append(f"{name[len(ROOT) :]}:{frame.f_code.co_qualname}")
        frame = frame.f_back
    return out[::-1]


def main() -> None:
    submitted: dict[int, list[str]] = {}  # the event loop's chain up to the job queue
    chains: list[list[str]] = []
    run = JobLimiter.run

    async def spy_run(self, fn, token=None):  # type: ignore[no-untyped-def]
        submitted[threading.get_ident()] = own_frames(sys._getframe(1))
        return await run(self, fn, token)

    forward = torch.nn.Module.__call__

    def spy_call(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if type(self).__name__.endswith(("ForCausalLM", "Model")):
            loop_part = next(iter(submitted.values()), [])
            chains.append(loop_part + ["(job thread)"] + own_frames(sys._getframe(1)))
        return forward(self, *args, **kwargs)

    JobLimiter.run = spy_run  # type: ignore[method-assign]
    torch.nn.Module.__call__ = spy_call  # type: ignore[method-assign]
    app = create_app(Settings(default_model="tiny-arith"))
    reward = {"kind": "numeric", "reference": "85"}
    bodies = {
        "given answers": {"prompt": "Q: 47+38=?\nA:", "answers": [" 85", " 75"], "reward": reward},
        "sampled answers": {"prompt": "Q: 47+38=?\nA:", "num_samples": 4, "reward": reward},
    }
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for body in bodies.values():  # warm: the model's load and the sampler's one-time probe
            client.post("/v1/analyze", json=body).raise_for_status()
        for label, body in bodies.items():
            chains.clear()
            client.post("/v1/analyze", json=body).raise_for_status()
            longest = max(chains, key=len)
            stops = [s for s in longest if not s.startswith("(")]
            files = {s.split(":")[0] for s in stops}
            print(f"{label}: {len(stops)} stops in {len(files)} files")
            for stop in longest:
                print("   ", stop)


if __name__ == "__main__":
    main()
