"""The HTTP API page's curl examples (docs/http-api.md), run as written against a real
`gmts serve` on 127.0.0.1."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from tests.app.api_helpers import free_port
from tests.patience import PATIENCE_S

# The first bash block of the HTTP API page, as written (the port is replaced by a free one).
HTTP_API_PAGE = Path(__file__).resolve().parents[3] / "docs" / "http-api.md"


def _first_bash_block(text: str) -> str:
    start = text.index("```bash\n") + len("```bash\n")
    return text[start : text.index("```", start)]


README_CURL = _first_bash_block(HTTP_API_PAGE.read_text(encoding="utf-8"))

# slow: a subprocess server plus real sampling on the demo model (~20-80 s on 2 busy cores)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained yet"
    ),
]


def _commands(port: int) -> list[str]:
    text = README_CURL.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace("\\\n", " ")
    commands, current = [], ""
    for line in text.strip().splitlines():
        current = f"{current}\n{line}" if current else line
        if current.count("'") % 2 == 0:  # a command ends when its quotes are closed
            commands.append(current)
            current = ""
    return commands


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise TimeoutError("gmts serve did not start")


def test_readme_curl_examples_work_against_gmts_serve(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "GMTS_UI_ENABLED": "0", "GMTS_TORCH_THREADS": "1"}
    cmd = [sys.executable, "-c", "from app.cli import main; main()", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_ready(f"http://127.0.0.1:{port}", proc)
        outputs = []
        for command in _commands(port):
            done = subprocess.run(
                ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, (command, done.stderr)
            outputs.append(done.stdout)
    finally:
        proc.terminate()
        banner = proc.communicate(timeout=PATIENCE_S)[0].decode()
    assert f"http://127.0.0.1:{port}/ui" not in banner  # UI disabled in this test
    assert f"http://127.0.0.1:{port}/docs" in banner
    health, models, sampled, given, _ = outputs
    assert json.loads(health) == {"status": "ok"}
    assert any(m["alias"] == "tiny-arith" for m in json.loads(models)["models"])
    sampled_body = json.loads(sampled)
    assert len(sampled_body["answers"]) == 8
    assert set(sampled_body["summary"]["selected_count"]) == {"entropy", "gmts"}
    assert [a["reward"] for a in json.loads(given)["answers"]] == [1.0, 0.0]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "analysis.csv").read_text())))
    assert len(rows) > 0 and {"entropy", "grad_proxy", "rank_gmts"} <= set(rows[0])
