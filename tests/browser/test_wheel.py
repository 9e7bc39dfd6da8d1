"""The built wheel is a working install: outside the source tree, `gmts serve` serves /ui with
its CSS and JS (shipped inside the package), and the API answers.

Offline: the wheel is built without build isolation, installed with ``--no-deps`` into a fresh
virtualenv whose dependencies come from this interpreter's site-packages (a plain path in a
``.pth`` file, so this checkout's editable install is not seen).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.live_server import free_port
from tests.patience import PATIENCE_MS, PATIENCE_S

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "gmts_core", "app", "static")
# no PYTHONPATH (it would put this checkout on the path) and no GMTS_* settings
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("GMTS_", "PYTHON"))}


def run(*cmd: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def build_wheel(tmp: Path) -> Path:
    """The wheel of a clean copy of the sources (the checkout gets no build/ or egg-info)."""
    src = tmp / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=skip)
        else:
            shutil.copy(path, src / name)
    dist = tmp / "dist"
    pip = (sys.executable, "-m", "pip")
    run(*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", dist, src, cwd=tmp)
    (wheel,) = dist.glob("gmts_explorer-*.whl")
    return wheel


def fresh_venv(tmp: Path, wheel: Path) -> Path:
    """A virtualenv with only the wheel installed; dependencies from this interpreter's."""
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    python = venv / "bin" / "python"
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp)
    deps = sysconfig.get_path("purelib")
    (Path(purelib.strip()) / "_gmts_deps.pth").write_text(deps + "\n")
    pip = (sys.executable, "-m", "pip", "--python", python)
    run(*pip, "install", "--no-deps", "--no-index", wheel, cwd=tmp)
    return venv


def test_wheel_installs_and_serves_the_ui_with_its_assets(tmp_path: Path, chromium: Any) -> None:
    wheel = build_wheel(tmp_path)
    venv = fresh_venv(tmp_path, wheel)
    where = tmp_path / "elsewhere"
    where.mkdir()
    code = "import app.ui.assets as u; print(u.STATIC_DIR)"
    located = run(venv / "bin" / "python", "-c", code, cwd=where)
    assert Path(located.strip()).is_relative_to(venv)  # the installed copy, not this checkout
    port = free_port()
    env = {**ENV, "GMTS_TORCH_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [venv / "bin" / "gmts", "serve", "--port", str(port)],
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "gmts serve did not start"
                time.sleep(0.2)  # polling a process we cannot subscribe to
        caps = httpx.get(f"{url}/v1/capabilities", timeout=PATIENCE_S).json()
        assert "gmts" in {m["name"] for m in caps["methods"]}
        page = chromium.new_page()
        try:
            page.set_default_timeout(PATIENCE_MS)
            page.goto(f"{url}/ui/", wait_until="load")
            page.wait_for_selector("#analyze-btn")
            # the token renderer's script ran, and its stylesheet's rules are on the page
            assert page.evaluate("window.__gmtsTipInstalled === true")
            shade = page.evaluate(
                "getComputedStyle(document.documentElement).getPropertyValue('--gmts-shade')"
            )
            assert shade.strip() == "204, 121, 167"
        finally:
            page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=PATIENCE_S)
