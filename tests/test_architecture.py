"""The architecture rules are code: import-linter's contracts (pyproject.toml) hold, and break.

The contracts: gmts_core never imports the web layer (app, fastapi, starlette, gradio, plotly,
uvicorn); the front ends (app.api, app.ui, app.cli) reach gmts_core only through
app.services, but for the library's vocabulary modules (its errors, cancellation, configs,
knobs, run budget), which they import where the names are defined; the subpackages of
gmts_core and app import each other without cycles, and so do the modules inside each, counting
the imports under ``if TYPE_CHECKING:`` too; gmts_core's subpackages keep the order
ARCHITECTURE.md draws (a layers contract). ``make lint`` runs the same check.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.patience import PATIENCE_S

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=1))"
WEB = "gmts_core never imports the web layer (app, fastapi, starlette, gradio, plotly, uvicorn)"
SERVICES = (
    "the front ends (app.api, app.ui, app.cli) reach gmts_core only through app.services, but "
    "for the library's vocabulary modules"
)
CYCLES = (
    "no import cycles between the subpackages of gmts_core and app, nor between the modules of "
    "each (type-checking imports included)"
)
LAYERS = (
    "gmts_core's subpackages in their order (ARCHITECTURE.md): each imports only those below it"
)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root`` with ``root``'s pyproject.toml."""
    return subprocess.run(
        [sys.executable, "-c", LINT],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )


def test_the_contracts_hold() -> None:
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    text = " ".join(run.stdout.split())
    assert all(f"{name} KEPT" in text for name in (WEB, SERVICES, CYCLES, LAYERS)), run.stdout


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The packages and the config, copied (no model weights, no caches)."""
    skip = shutil.ignore_patterns("__pycache__", "tiny-arith", "*.pyc")
    for package in ("gmts_core", "app"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("gmts_core/stats/metrics.py", "import fastapi", WEB),
        ("gmts_core/analysis/summaries.py", "import app.services", WEB),
        ("app/ui/render.py", "import gmts_core.analysis.analyze", SERVICES),
        ("app/cli/analyze.py", "from gmts_core.stats import metrics", SERVICES),
        ("gmts_core/analysis/records.py", "import gmts_core.analysis.analyze", CYCLES),
        ("gmts_core/stats/metrics.py", "import gmts_core.grpo.step", CYCLES),
        # an annotation-only import closes a cycle too
        (
            "gmts_core/grpo/records.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import gmts_core.grpo.step",
            CYCLES,
        ),
        ("app/schemas/methods.py", "import app.services.catalog", CYCLES),
        ("app/ui/tabs/explore/controls.py", "import app.ui.tabs.explore.tab", CYCLES),
        # a lower layer importing a higher one (no cycle: nothing imports back)
        ("gmts_core/model/kv_cache.py", "import gmts_core.experiments.compare", LAYERS),
        ("gmts_core/tasks/arith.py", "import gmts_core.runs.base", LAYERS),
    ],
)
def test_a_violating_import_breaks_the_check(
    copy: Path, module: str, line: str, broken: str
) -> None:
    path = copy / module
    path.write_text(path.read_text() + f"\n{line}  # deliberately breaking a contract\n")
    run = lint_imports(copy)
    assert run.returncode != 0
    assert re.search(r"Contracts: \d kept, [12] broken\.", run.stdout), run.stdout
    # a contract with ignored imports says how many after its verdict
    verdict = re.compile(r"BROKEN( \(\d+ ignored imports?\))?$")
    broken_lines = [s for s in run.stdout.splitlines() if verdict.search(s)]
    assert f"{broken} BROKEN" in " ".join(run.stdout.split()), run.stdout
    assert broken_lines, run.stdout
