"""The one mapping from the library's results to the API's bodies (app.services.responses)."""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient

from app.services.responses import analysis_json
from gmts_core.analysis.analyze import GroupInput, analyze
from gmts_core.config import AnalysisConfig
from gmts_core.model.loading import LoadedModel

PROMPT = "Q: 47+38=?"
ANSWERS = ["A: 7+8=15 carry 1, 4+3+1=8, answer 85", "85", "answer 84 Grüße 😀", "I think 58."]
REWARDS = [1.0, 1.0, 0.0, 0.0]

TOKEN_KEYS = {
    "position",
    "id",
    "text",
    "logprob",
    "prob",
    "entropy",
    "grad_norm",
    "grad_proxy",
    "scores",
    "ranks",
    "selected",
    "alternatives",
}
ANSWER_KEYS = {"text", "reward", "advantage", "weight", "tokens"}
SUMMARY_KEYS = {
    "num_tokens",
    "k",
    "zero_signal",
    "gradient_coverage",
    "overlap",
    "spearman_entropy_grad",
}


def test_json_body_has_the_design_keys(tiny_llama: LoadedModel) -> None:
    res = analyze(tiny_llama, [GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS)])
    body = json.loads(json.dumps(analysis_json(res), allow_nan=False))
    assert {"prompt", "answers", "summary"} <= set(body)
    assert "groups" not in body
    methods = set(AnalysisConfig().methods)
    for ans in body["answers"]:
        assert ANSWER_KEYS <= set(ans)
        for tok in ans["tokens"]:
            assert TOKEN_KEYS <= set(tok)
            assert set(tok["scores"]) == set(tok["ranks"]) == set(tok["selected"]) == methods
            assert all({"id", "text", "prob"} <= set(alt) for alt in tok["alternatives"])
    s = body["summary"]
    assert SUMMARY_KEYS <= set(s)
    assert set(s["gradient_coverage"]) == methods
    assert set(s["spearman_entropy_grad"]) == {"batch", "within_answer_median"}
    assert all({"count", "jaccard"} == set(v) for v in s["overlap"].values())
    n = s["num_tokens"]
    assert n == sum(len(a["tokens"]) for a in body["answers"])
    assert s["k"] == math.ceil(0.2 * n)
    assert s["selected_count"]["all"] == n
    assert all(s["selected_count"][m] == s["k"] for m in methods - {"all"})
    assert s["gradient_coverage"]["all"] == pytest.approx(1.0)


def test_every_route_declares_its_response_schema(client: TestClient) -> None:
    """OpenAPI shows each JSON body's schema; the gradcheck tokens carry their exact norms."""
    spec = client.get("/openapi.json").json()
    for path, method, schema in [
        ("/v1/analyze", "post", "AnalyzeResponse"),
        ("/v1/gradcheck", "post", "GradcheckResponse"),
        ("/v1/capabilities", "get", "CapabilitiesResponse"),
        ("/v1/sessions", "post", "SessionOut"),
        ("/v1/sessions/{session_id}/step", "post", "StepOut"),
        ("/v1/sessions/{session_id}/evaluate", "post", "EvaluationOut"),
    ]:
        ok = spec["paths"][path][method]["responses"]
        ok = ok.get("200") or ok["201"]
        ref = ok["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith(f"/{schema}"), (path, ref)
    token = spec["components"]["schemas"]["TokenOut"]["properties"]
    assert {"grad_proxy", "true_grad_norm", "head_grad_norm"} <= set(token)


def test_the_route_returns_the_mapping_of_the_librarys_result(
    client: TestClient, tiny_llama: LoadedModel
) -> None:
    """Single form without the batch keys, no keys the request did not ask for."""
    r = client.post(
        "/v1/analyze", json={"prompt": PROMPT, "answers": ANSWERS[:2], "rewards": [1, 0]}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert "groups" not in body and "grad_head" not in body["answers"][0]["tokens"][0]
    assert "true_grad_norm" not in body["answers"][0]["tokens"][0]
