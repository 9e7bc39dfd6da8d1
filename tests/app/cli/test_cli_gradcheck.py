"""`gmts gradcheck`: the fidelity table, and the analyze JSON with true gradient norms."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import app.cli.gradcheck  # noqa: F401  (registers the command)
from app.cli._app import cli
from tests.app.api_helpers import TINY

ARGS = ["--prompt", "Q: 47+38=?", "--answer", "answer 85", "--answer", "answer 75"]


def _run(model_root: Path, *args: str):  # noqa: ANN202
    return CliRunner().invoke(cli, ["gradcheck", "--model", str(model_root / TINY), *ARGS, *args])


def test_json_adds_true_norms_and_fidelity(model_root: Path) -> None:
    r = _run(model_root, "--rewards", "1,0", "--json")
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    tokens = [t for a in body["answers"] for t in a["tokens"]]
    assert tokens and all(t["true_grad_norm"] > 0 and t["head_grad_norm"] > 0 for t in tokens)
    assert body["fidelity"]["num_tokens"] == len(tokens)
    assert abs(body["fidelity"]["cosine_to_full"]["all"] - 1.0) < 1e-6


def test_table_and_token_limit(model_root: Path) -> None:
    r = _run(model_root, "--rewards", "1,0")
    assert r.exit_code == 0, r.output
    assert "How good is the proxy?" in r.stdout and "gmts_entropy" in r.stdout
    r = _run(model_root, "--rewards", "1,0", "--max-tokens", "1")
    assert r.exit_code == 2 and "exact-gradient limit of 1" in r.output
