"""The UI in remote mode lists the server's methods, reward rules and limits, not its own.

The server runs in its own process with a selection method and a reward rule that only it has
registered; the UI, built here against it through the remote backend, offers both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.core.config import Settings
from app.live_server import free_port
from app.services.catalog import method_infos
from app.ui.blocks import build_blocks
from app.ui.remote_backend import RemoteBackend
from tests.patience import PATIENCE_S

SERVER = textwrap.dedent(
    """
    import sys
    import uvicorn
    from gmts_core.methods.rewards import RewardVerdict, register_reward
    from gmts_core.methods.selection import register_method
    from app.core.config import Settings
    from app.main import create_app

    register_method("server_only", "a method only the server registered")(lambda x: x.entropy)
    register_reward("server_rule")(lambda t, r: RewardVerdict(1.0, "server_rule", t, r, "correct"))
    settings = Settings(ui_enabled=False, torch_threads=1, max_session_steps=7, max_new_tokens=40)
    uvicorn.run(create_app(settings), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GMTS_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)  # polling a process we cannot subscribe to
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=PATIENCE_S)


def _choices(blocks: Any, elem_id: str) -> list[str]:
    (component,) = [b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == elem_id]
    return [c[1] if isinstance(c, tuple) else c for c in component.choices]


def test_remote_ui_lists_the_servers_methods_rules_and_limits(server_url: str) -> None:
    assert "server_only" not in {m.name for m in method_infos()}  # not registered here
    backend = RemoteBackend(server_url)
    caps = backend.capabilities()
    listed = {m.name: m.description for m in caps.methods}
    assert listed["server_only"] == "a method only the server registered"
    blocks = build_blocks(backend, Settings(api_url=server_url))
    for elem_id in ("method-a", "method-b", "train-method", "compare-methods"):
        assert "server_only" in _choices(blocks, elem_id), elem_id
    assert "server_rule" in _choices(blocks, "reward-kind")
    by_id = {getattr(b, "elem_id", None): b for b in blocks.blocks.values()}
    assert by_id["train-steps"].maximum == 7  # the server's GMTS_MAX_SESSION_STEPS, not ours
    assert by_id["train-max-new"].maximum == 40  # the server's GMTS_MAX_NEW_TOKENS
