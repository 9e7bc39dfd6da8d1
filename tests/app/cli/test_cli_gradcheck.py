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


def test_float64_on_a_mixture_of_experts_model(tmp_path: Path) -> None:
    """Mixtral's grouped expert kernel has no float64 version: the experts run eagerly, so
    `--precision float64` gives the table instead of a traceback."""
    from transformers import AutoModelForCausalLM

    from tests.arch_matrix import tiny_config
    from tests.tiny_models import byte_level_bpe_tokenizer

    tok = byte_level_bpe_tokenizer()
    config = tiny_config("mixtral")
    config.vocab_size = len(tok)
    config.pad_token_id, config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    folder = tmp_path / "tiny-mixtral"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    r = CliRunner().invoke(
        cli,
        ["gradcheck", "--model", str(folder), *ARGS, "--rewards", "1,0", "--precision", "float64"],
    )
    assert r.exit_code == 0, r.output
    assert "How good is the proxy?" in r.stdout and "Traceback" not in r.output
