"""The documentation: a short README, and a docs site that builds with ``mkdocs build --strict``
(no broken link or anchor, no missing API reference, every page in the nav: mkdocs.yml makes
each of those a warning, and strict mode fails on warnings)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_is_short_and_gives_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 12_000
    commands = re.search(r"## Two commands\n(.*?)\n## ", text, re.S)
    assert commands is not None
    assert re.findall(r"```bash\n(.*?)\n```", commands.group(1)) == ["make serve", "make test"]


def test_every_markdown_page_of_docs_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    excluded = {"compare/literature-1/table.md", "compare/literature-2/table.md",
                "compare/literature-3/table.md", "compare/literature-4/table.md"}  # fmt: skip
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    missing = sorted(p for p in pages - excluded if f" {p}" not in config)
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


@pytest.mark.slow  # imports every CLI command and renders the API reference: ~1 min
def test_docs_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "analysis" / "index.html").is_file()
    cli = (tmp_path / "site" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "analyze-run" in cli and "--batch-size" in cli  # generated from the commands
