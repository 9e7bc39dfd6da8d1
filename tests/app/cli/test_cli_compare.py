"""`gmts compare` via the compare service: compare.json, a self-contained compare.html, table.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import load_commands
from tests.tiny_models import save_tiny_model


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("cmp") / "llama")


def test_cli_writes_json_self_contained_html_and_table(folder: Path, tmp_path: Path) -> None:
    cli = load_commands()
    assert "compare" in [c.name for c in cli.registered_commands]

    args = [
        "compare", "--model", str(folder), "--methods", "all,gmts", "--steps", "1", "--seeds",
        "1", "--group-size", "2", "--prompts-per-step", "1", "--eval-problems", "2",
        "--max-new-tokens", "4", "--out", str(tmp_path),
    ]  # fmt: skip
    run = CliRunner().invoke(cli, args)
    assert run.exit_code == 0, run.output
    body = json.loads((tmp_path / "compare.json").read_text())
    assert [row["method"] for row in body["table"]] == ["all", "gmts"]
    page = (tmp_path / "compare.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "plotly" in page.lower() and "<script src=" not in page  # plotly.js inline
    assert all(m in page for m in ("all", "gmts"))
    table = (tmp_path / "table.md").read_text()
    assert "final held-out accuracy" in table
    assert table.rstrip("\n").count("\n") == 1 + 2  # header, rule, one row per method
    bad = CliRunner().invoke(cli, ["compare", "--model", str(folder), "--methods", "nope"])
    assert bad.exit_code == 2 and "valid" in bad.output
