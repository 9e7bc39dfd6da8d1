"""The GPU check's setup step, dry-run on the CPU machine (``GMTS_GPU_CHECK_DRY_RUN=1``).

A bare GPU machine gets what it lacks from a folder of wheels that travels with the tree;
``scripts/gpu_check.sh`` unpacks them into a temporary folder on PYTHONPATH and checks that the
run's imports resolve before anything touches CUDA. Here the folder holds one tiny wheel built
on the spot (offline): the dry run must unpack it, import it, write the summary, and fail when
the wheel is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = "gmts_gpu_probe"


def build_wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel of the package ``gmts_gpu_probe`` (PEP 427 layout)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{PROBE}-0.1-py3-none-any.whl"
    info = f"{PROBE}-0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{PROBE}/__init__.py", "VALUE = 42\n")
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 0.1\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def dry_run(out: Path, wheels: Path, flag: bool = False) -> subprocess.CompletedProcess[str]:
    """The script's dry run, asked for by GMTS_GPU_CHECK_DRY_RUN=1 or (``flag``) --dry-run."""
    env = {
        **os.environ,
        "PY": sys.executable,
        "GMTS_GPU_WHEELS": str(wheels),
        "GMTS_GPU_CHECK_IMPORTS": f"{PROBE},gmts_core.errors",
    }
    env.pop("GMTS_GPU_CHECK_DRY_RUN", None)
    if not flag:
        env["GMTS_GPU_CHECK_DRY_RUN"] = "1"
    args = ["--dry-run", str(out)] if flag else [str(out)]
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("flag", [False, True], ids=["env", "--dry-run"])
def test_dry_run_unpacks_the_wheels_and_resolves_the_imports(tmp_path: Path, flag: bool) -> None:
    wheel = build_wheel(tmp_path / "wheels")
    proc = dry_run(tmp_path / "out", wheel.parent, flag)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    setup = (tmp_path / "out" / "setup.txt").read_text()
    assert f"unpacked {wheel.name}" in setup
    assert f"imports resolve: {PROBE},gmts_core.errors" in setup
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.startswith("## GPU check") and "dry run" in summary


def test_dry_run_fails_when_a_needed_package_is_missing(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()  # an empty wheel folder: the probe cannot be imported
    proc = dry_run(tmp_path / "out", tmp_path / "wheels")
    assert proc.returncode == 1
    assert "imports unresolved" in proc.stderr
