"""`gmts analyze`: the JSON body of POST /v1/analyze, and the coloured terminal view."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import app.cli.analyze  # noqa: F401  (registers the command)
from app.cli._app import cli
from app.main import create_app
from tests.app.api_helpers import make_settings
from tests.app.services.test_bodies import SUMMARY_KEYS, TOKEN_KEYS

PROMPT = "Q: 47+38=?"
ANSWER_ARGS = ["--answer", "answer 85", "--answer", "I think 75 😀", "--answer", "85"]


def _strict_json(text: str) -> Any:
    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    return json.loads(text, parse_constant=no_constants)


def _run(folder: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["analyze", "--model", str(folder), "--prompt", PROMPT, *args])


def _assert_design_keys(body: dict[str, Any]) -> None:
    assert {"prompt", "answers", "summary"} <= set(body)
    for ans in body["answers"]:
        assert {"text", "reward", "advantage", "weight", "tokens"} <= set(ans)
        for tok in ans["tokens"]:
            assert TOKEN_KEYS <= set(tok)
    assert SUMMARY_KEYS <= set(body["summary"])
    assert set(body["summary"]["spearman_entropy_grad"]) == {"batch", "within_answer_median"}


def test_json_is_the_api_body(tiny_llama_dir: Path) -> None:
    r = _run(tiny_llama_dir, *ANSWER_ARGS, "--rewards", "1,0,1", "--ratio", "0.3", "--json")
    assert r.exit_code == 0, r.output
    body = _strict_json(r.stdout)
    _assert_design_keys(body)
    assert [a["reward"] for a in body["answers"]] == [1.0, 0.0, 1.0]
    assert body["answers"][1]["text"] == "I think 75 😀"
    assert body["notes"] == []  # the API's body, notes included


@pytest.mark.parametrize("rewards", ["1,0,1", "1,1,1"])
def test_json_equals_post_v1_analyze_for_the_same_request(rewards: str, tmp_path: Path) -> None:
    """`gmts analyze --json` prints exactly what POST /v1/analyze returns (the bundled model)."""
    args = ["analyze", "--model", "tiny-arith", "--prompt", PROMPT, *ANSWER_ARGS]
    r = CliRunner().invoke(cli, [*args, "--rewards", rewards, "--ratio", "0.3", "--json"])
    assert r.exit_code == 0, r.output
    request = {
        "model": "tiny-arith",
        "prompt": PROMPT,
        "answers": ["answer 85", "I think 75 😀", "85"],
        "rewards": [float(v) for v in rewards.split(",")],
        "selection": {"ratio": 0.3},
    }
    with TestClient(create_app(make_settings(tmp_path))) as client:
        api = client.post("/v1/analyze", json=request)
    assert api.status_code == 200, api.text
    assert _strict_json(r.stdout) == api.json()
    assert bool(api.json()["notes"]) == (rewards == "1,1,1")  # the zero-signal note, in both


def test_json_with_sampling_and_a_reward_rule(tiny_llama_dir: Path) -> None:
    args = ["-n", "3", "--max-new-tokens", "5", "--reference", "85", "--scope", "answer", "--json"]
    r = _run(tiny_llama_dir, *args)
    assert r.exit_code == 0, r.output
    body = _strict_json(r.stdout)
    _assert_design_keys(body)
    assert len(body["answers"]) == 3
    assert all(1 <= len(a["tokens"]) <= 5 for a in body["answers"])
    assert {a["reward_detail"]["rule"] for a in body["answers"]} == {"numeric"}
    assert body["summary"]["scope"] == "answer"


def test_rich_view_marks_tokens_and_prints_the_summary(tiny_llama_dir: Path) -> None:
    r = _run(tiny_llama_dir, *ANSWER_ARGS, "--rewards", "1,0,1")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "legend" in out and "only entropy" in out and "only gmts" in out
    assert "answer 85" in out and "😀" in out
    for method in ("entropy", "gmts", "gmts_entropy", "surprisal", "random", "all"):
        assert method in out
    assert "Spearman" in out


def test_zero_signal_is_said_plainly(tiny_llama_dir: Path) -> None:
    r = _run(tiny_llama_dir, *ANSWER_ARGS, "--rewards", "1,1,1")
    assert r.exit_code == 0, r.output
    assert "no learning signal" in " ".join(r.stdout.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rewards", "1,0"], "rewards has 2 values for 3 answers"),  # the API's message
        (["--rewards", "1,x,0"], "comma-separated"),
        ([], "--rewards or --reference"),
        (["--rewards", "1,0,1", "--advantage", "ppo"], "grpo"),
    ],
)
def test_bad_input_exits_with_a_message(
    tiny_llama_dir: Path, args: list[str], message: str
) -> None:
    r = _run(tiny_llama_dir, *ANSWER_ARGS, *args)
    assert r.exit_code == 2
    assert message in " ".join(r.output.split())


def test_console_script_prints_valid_json(tiny_llama_dir: Path) -> None:
    """The installed `gmts` entry point, in a fresh process, as a user runs it."""
    exe = shutil.which("gmts", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the gmts console script is not installed in this environment")
    cmd = [exe, "analyze", "--model", str(tiny_llama_dir), "--prompt", PROMPT, *ANSWER_ARGS]
    proc = subprocess.run(
        [*cmd, "--rewards", "1,0,1", "--json"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    _assert_design_keys(_strict_json(proc.stdout))
