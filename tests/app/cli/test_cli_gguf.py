"""`gmts analyze --model FILE.gguf`: a GGUF file given by path is analysed (converted once,
then read from the cache); one transformers cannot read fails with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import app.cli.analyze  # noqa: F401  (registers the command)
from app.cli._app import cli
from tests.gguf_files import write_tiny_gguf


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GMTS_GGUF_CACHE", str(tmp_path / "cache"))


def _analyze(model: Path, *args: str):
    answers = ["--answer", "The answer is 85.", "--answer", "47 + 38 = 75"]
    command = ["analyze", "--model", str(model), "--prompt", "What is 47 + 38?", *answers]
    return CliRunner().invoke(cli, [*command, "--rewards", "1,0", *args])


def test_a_gguf_file_by_path(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "tiny.gguf", "Q8_0")
    first = _analyze(path, "--json")
    assert first.exit_code == 0, first.output
    body = json.loads(first.stdout)
    assert [a["reward"] for a in body["answers"]] == [1.0, 0.0]
    assert all(a["tokens"] for a in body["answers"])
    again = _analyze(path, "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["answers"] == body["answers"]


def test_an_unreadable_gguf_file_fails_with_the_reason(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "q81.gguf", "Q8_1")
    result = _analyze(path)
    assert result.exit_code != 0
    assert "Q8_1 cannot be de-quantized" in result.output
