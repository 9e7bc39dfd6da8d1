"""POST /v1/gradcheck through TestClient: the analyze body plus exact per-token gradients."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.schemas.gradcheck import GradcheckRequest
from app.services.gradcheck import GradcheckService
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput
from gmts_core.errors import LimitExceededError
from gmts_core.experiments.gradcheck import gradcheck
from gmts_core.model.loading import load_model
from tests.app.api_helpers import TINY, given_body, make_settings


def _tokens(body: dict[str, Any]) -> list[dict[str, Any]]:
    groups = body["groups"] if "groups" in body else [body]
    return [t for g in groups for a in g["answers"] for t in a["tokens"]]


def test_tokens_gain_true_norms_and_fidelity(client: TestClient, model_root: Path) -> None:
    r = client.post("/v1/gradcheck", json=given_body(precision="float64"))
    assert r.status_code == 200, r.text
    body = r.json()
    tokens = _tokens(body)
    assert tokens and all({"true_grad_norm", "head_grad_norm", "entropy"} <= set(t) for t in tokens)
    fid = body["fidelity"]
    assert fid["num_tokens"] == len(tokens) == body["summary"]["num_tokens"]
    assert fid["precision"] == "float64"
    assert fid["cosine_to_full"]["all"] == pytest.approx(1.0, abs=1e-9)
    assert fid["true_grad_coverage"]["all"] == pytest.approx(1.0)
    assert set(fid["spearman"]) == set(body["settings"]["methods"])

    # the route is the library's gradcheck on the same inputs, nothing more
    lm = load_model(str(model_root / TINY), name=TINY)
    req = given_body()
    group = GroupInput(req["prompt"], req["answers"], rewards=req["rewards"])
    lib = gradcheck(lm, [group], AnalysisConfig(top_alternatives=2), precision="float64")
    expected = lib.gradients.true_norm.tolist()
    got = [t["true_grad_norm"] for t in tokens]
    assert got == pytest.approx(expected, rel=1e-9)
    assert fid["full_grad_norm"] == pytest.approx(lib.fidelity["full_grad_norm"], rel=1e-9)


def test_batch_form_counts_every_group(client: TestClient) -> None:
    groups = [
        {"prompt": "Q: 1+1=?\nA:", "answers": [" 2", " 3"], "rewards": [1, 0]},
        {"prompt": "Q: 2+2=?\nA:", "answers": [" 4", " 5", " 4"], "rewards": [1, 0, 1]},
    ]
    r = client.post("/v1/gradcheck", json={"groups": groups, "top_alternatives": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["groups"]) == 2
    assert body["fidelity"]["num_tokens"] == len(_tokens(body)) == body["summary"]["num_tokens"]


def test_zero_signal_group_has_no_gradient(client: TestClient) -> None:
    r = client.post("/v1/gradcheck", json=given_body(rewards=[1, 1, 1]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert all(t["true_grad_norm"] == 0.0 for t in _tokens(body))
    fid = body["fidelity"]
    assert fid["full_grad_norm"] == 0.0
    assert fid["cosine_to_full"]["gmts"] is None  # undefined, not NaN
    assert any("no learning signal" in n for n in body["notes"])


def test_token_limit_is_413_and_bad_fields_are_422(client: TestClient) -> None:
    r = client.post("/v1/gradcheck", json=given_body(max_tokens=2))
    assert r.status_code == 413, r.text
    assert "exact-gradient limit of 2" in r.json()["error"]["message"]
    r = client.post("/v1/gradcheck", json=given_body(precision="float16"))
    assert r.status_code == 422 and "precision" in r.json()["error"]["message"]
    r = client.post("/v1/gradcheck", json=given_body(max_tokens=0))
    assert r.status_code == 422 and "max_tokens" in r.json()["error"]["message"]


def test_unknown_session_and_model_are_404(client: TestClient) -> None:
    r = client.post("/v1/gradcheck", json=given_body(session_id="nope"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_session"
    r = client.post("/v1/gradcheck", json=given_body(model="no-such-model"))
    assert r.status_code == 404, r.text


def test_session_policy_is_checked(model_root: Path) -> None:
    """With session_id the gradients are the session policy's, not the base model's."""
    app = create_app(make_settings(model_root))
    with TestClient(app) as client:
        base = client.post("/v1/gradcheck", json=given_body()).json()
        sid = client.post(
            "/v1/sessions", json={"group_size": 4, "max_new_tokens": 8, "learning_rate": 0.5}
        ).json()["session_id"]
        prompts = [{"prompt": "Q: 1+1=?\nA:", "reference": "[0-9]", "reward_kind": "regex"}]
        step = client.post(f"/v1/sessions/{sid}/step", json={"steps": 2, "prompts": prompts})
        assert step.status_code == 200, step.text
        r = client.post("/v1/gradcheck", json=given_body(session_id=sid))
        assert r.status_code == 200, r.text
        trained = r.json()
    assert trained["model"] != base["model"] and sid in trained["model"]
    a, b = _tokens(base), _tokens(trained)
    assert any(not math.isclose(x["logprob"], y["logprob"]) for x, y in zip(a, b, strict=True))
    assert any(
        not math.isclose(x["true_grad_norm"], y["true_grad_norm"])
        for x, y in zip(a, b, strict=True)
    )


def test_models_over_the_parameter_limit_are_refused(app: Any) -> None:
    service = GradcheckService(app.state.services.analysis)
    service.max_parameters = 10
    with pytest.raises(LimitExceededError, match="parameters"):
        service.run(GradcheckRequest.model_validate(given_body()))


def test_documented_in_openapi(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/gradcheck"]["post"]
    assert {"200", "413", "422", "429"} <= set(op["responses"])
