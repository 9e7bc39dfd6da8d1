"""On the bundled model, POST /v1/analyze and `gmts analyze --json` agree exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import app.cli.analyze  # noqa: F401  (registers the command)
from app.cli._app import cli
from app.main import create_app
from gmts_core.demo import DEMO_ALIAS, DEMO_MODEL_DIR
from tests.app.api_helpers import make_settings

pytestmark = pytest.mark.skipif(
    not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained yet"
)

PROMPT = "Q: 47+38=?\nA:"


def test_api_matches_cli_on_the_demo_model(model_root: Path) -> None:
    args = ["analyze", "--prompt", PROMPT, "--model", DEMO_ALIAS, "--reference", "85"]
    args += ["-n", "8", "--seed", "3", "--max-new-tokens", "48", "--json"]
    run = CliRunner().invoke(cli, args)
    assert run.exit_code == 0, run.output
    from_cli = json.loads(run.stdout)

    settings = make_settings(model_root, default_model=DEMO_ALIAS, max_new_tokens=64)
    body = {
        "prompt": PROMPT,
        "num_samples": 8,
        "seed": 3,
        "max_new_tokens": 48,
        "reward": {"kind": "numeric", "reference": "85"},
    }
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/analyze", json=body)
    assert r.status_code == 200, r.text
    from_api = r.json()

    assert len(from_api["answers"]) == 8
    for a_api, a_cli in zip(from_api["answers"], from_cli["answers"], strict=True):
        assert a_api["text"] == a_cli["text"] and a_api["reward"] == a_cli["reward"]
        for t_api, t_cli in zip(a_api["tokens"], a_cli["tokens"], strict=True):
            for key in ("id", "entropy", "grad_proxy"):
                assert t_api[key] == t_cli[key]
            assert t_api["ranks"]["gmts"] == t_cli["ranks"]["gmts"]
            assert t_api["selected"] == t_cli["selected"]
    assert from_api == from_cli  # the whole body, notes included
