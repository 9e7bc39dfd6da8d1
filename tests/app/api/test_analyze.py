"""POST /v1/analyze: the API contract in the single and the batch form."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.errors import SessionNotFoundError
from app.services.responses import analysis_json
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.analysis.difference_reasons import REASON_KEYS
from gmts_core.model.loading import LoadedModel, load_model
from tests.app.api_helpers import TINY, given_body, make_settings
from tests.tiny_models import save_tiny_model

TOKEN_KEYS = {
    "position", "id", "text", "logprob", "prob", "entropy", "grad_norm", "grad_proxy",
    "scores", "ranks", "selected", "alternatives",
}  # fmt: skip
SUMMARY_KEYS = {
    "num_tokens", "k", "zero_signal", "gradient_coverage", "overlap", "spearman_entropy_grad",
    "wasted_share", "selected_count",
}  # fmt: skip


def test_single_form_has_the_design_keys(client: TestClient) -> None:
    r = client.post("/v1/analyze", json=given_body())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prompt"] == given_body()["prompt"]
    assert len(body["answers"]) == 3
    for a in body["answers"]:
        assert {"text", "reward", "advantage", "weight", "tokens"} <= set(a)
        for t in a["tokens"]:
            assert TOKEN_KEYS <= set(t)
            assert len(t["alternatives"]) == 2
    assert SUMMARY_KEYS <= set(body["summary"])
    assert set(body["summary"]["spearman_entropy_grad"]) == {"batch", "within_answer_median"}


def test_why_they_differ_for_every_pair(client: TestClient) -> None:
    body = client.post("/v1/analyze", json=given_body()).json()
    pairs = [(d["method_a"], d["method_b"]) for d in body["differences"]]
    assert [f"{a}|{b}" for a, b in pairs] == list(body["summary"]["overlap"])
    tokens = body["answers"]
    for d in body["differences"]:
        a, b = d["method_a"], d["method_b"]
        assert sum(r["count"] for r in d["reasons"]) == d["only_a"] + d["only_b"]
        for r in d["reasons"]:
            assert r["key"] in REASON_KEYS
            for ref in r["tokens"]:
                t = tokens[ref["answer"]]["tokens"][ref["position"]]
                other = b if ref["selected_by"] == a else a
                assert t["selected"][ref["selected_by"]] and not t["selected"][other]


def test_body_equals_the_library_result(client: TestClient) -> None:
    """The route adds nothing to the numbers: same as gmts_core.analyze on the same model."""
    r = client.post("/v1/analyze", json=given_body())
    lm = client.app.state.services.models.get(TINY)
    req = given_body()
    direct = analyze(
        lm,
        [GroupInput(req["prompt"], req["answers"], rewards=[float(x) for x in req["rewards"]])],
        AnalysisConfig(top_alternatives=2),
    )
    assert r.json() == json.loads(json.dumps(analysis_json(direct)))


def test_selection_keeps_ceil_ratio_tokens(client: TestClient) -> None:
    body = given_body(selection={"ratio": 0.3, "scope": "batch", "methods": ["entropy", "gmts"]})
    out = client.post("/v1/analyze", json=body).json()
    n = sum(len(a["tokens"]) for a in out["answers"])
    k = math.ceil(0.3 * n)
    assert out["summary"]["num_tokens"] == n and out["summary"]["k"] == k
    for m in ("entropy", "gmts"):
        picked = sum(t["selected"][m] for a in out["answers"] for t in a["tokens"])
        assert picked == k
        ranks = sorted(t["ranks"][m] for a in out["answers"] for t in a["tokens"])
        assert ranks == list(range(1, n + 1))
    assert out["settings"]["methods"] == ["entropy", "gmts"]


def test_sampling_is_reproducible_with_a_seed(client: TestClient) -> None:
    body = {"prompt": "Q: 1+2=?\nA:", "num_samples": 3, "max_new_tokens": 5, "seed": 7}
    body["reward"] = {"kind": "numeric", "reference": "3"}
    first = client.post("/v1/analyze", json=body).json()
    second = client.post("/v1/analyze", json=body).json()
    assert first == second
    assert len(first["answers"]) == 3
    assert all(1 <= len(a["tokens"]) <= 5 for a in first["answers"])


def test_zero_signal_group_says_so(client: TestClient) -> None:
    out = client.post("/v1/analyze", json=given_body(rewards=[1, 1, 1])).json()
    assert out["summary"]["zero_signal"] is True
    assert any("no learning signal" in n for n in out["notes"])
    assert all(t["grad_proxy"] == 0 for a in out["answers"] for t in a["tokens"])
    mixed = client.post("/v1/analyze", json=given_body()).json()
    assert not any("no learning signal" in n for n in mixed["notes"])


def test_batch_form_inherits_top_level_fields_and_scopes_per_group(client: TestClient) -> None:
    body = {
        "groups": [
            {"prompt": "Q: 1+2=?\nA:", "rewards": [1, 0]},
            {"prompt": "Q: 5+5=?\nA:", "answers": [" 42", " 25", " 85"], "rewards": [1, 0, 0]},
        ],
        "num_samples": 2,
        "max_new_tokens": 4,
        "selection": {"ratio": 0.5, "scope": "group", "methods": ["gmts"]},
    }
    r = client.post("/v1/analyze", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["summary"]["num_groups"] == 2 and "prompt" not in out
    g0, g1 = out["groups"]
    assert len(g0["answers"]) == 2 and all(len(a["tokens"]) <= 4 for a in g0["answers"])
    assert [a["text"] for a in g1["answers"]] == [" 42", " 25", " 85"]
    for g in out["groups"]:
        n = sum(len(a["tokens"]) for a in g["answers"])
        picked = sum(t["selected"]["gmts"] for a in g["answers"] for t in a["tokens"])
        assert picked == math.ceil(0.5 * n)


def test_batch_with_a_zero_signal_group_wastes_no_gmts_budget(client: TestClient) -> None:
    body = {
        "groups": [
            {"prompt": "Q: 1+2=?\nA:", "answers": [" 3", " 4"], "rewards": [1, 0]},
            {"prompt": "Q: 5+5=?\nA:", "answers": [" 10", " 10"], "rewards": [1, 1]},
        ],
        "selection": {"ratio": 0.2, "methods": ["entropy", "gmts"]},
    }
    out = client.post("/v1/analyze", json=body).json()
    assert out["summary"]["num_zero_signal_groups"] == 1
    assert out["summary"]["wasted_share"]["gmts"] == 0
    assert any("1 of 2 groups" in n for n in out["notes"])


def test_session_id_without_session_service_is_404_and_loads_nothing(client: TestClient) -> None:
    r = client.post("/v1/analyze", json=given_body(session_id="abc"))
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "unknown_session"
    assert client.get("/readyz").json()["loaded"] is False


class _Sessions:
    """A real session-like provider: one policy model per known id."""

    def __init__(self, policies: dict[str, LoadedModel]) -> None:
        self.policies = policies

    @contextmanager
    def use_policy(self, session_id: str) -> Iterator[LoadedModel]:
        if session_id not in self.policies:
            raise SessionNotFoundError(f"unknown session {session_id!r}")
        yield self.policies[session_id]


@pytest.fixture(scope="module")
def policy_model(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    folder = save_tiny_model(tmp_path_factory.mktemp("policy") / "p", "gpt2", seed=3)
    return load_model(folder, name="policy-of-s1")


def test_session_policy_is_used_when_registered(
    model_root: Path, policy_model: LoadedModel
) -> None:
    app = create_app(make_settings(model_root))
    app.state.services.analysis.sessions = _Sessions({"s1": policy_model})
    with TestClient(app) as c:
        r = c.post("/v1/analyze", json=given_body(session_id="s1"))
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "policy-of-s1"
        missing = c.post("/v1/analyze", json=given_body(session_id="s2"))
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "unknown_session"


def test_openapi_documents_examples_and_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/analyze"]["post"]
    examples = op["requestBody"]["content"]["application/json"]["examples"]
    assert {"sampled", "given", "batch"} <= set(examples)
    assert {"401", "404", "413", "422", "429"} <= set(op["responses"])
    assert "ErrorBody" in op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]


def test_numeric_json_reference_keeps_its_form(client: TestClient) -> None:
    """A JSON number reference 85 must compare as "85" (not "85.0") under the exact rule."""
    body = given_body(answers=[" 85", " 75"], rewards=None)
    body["reward"] = {"kind": "exact", "reference": 85}
    out = client.post("/v1/analyze", json=body).json()
    assert [a["reward"] for a in out["answers"]] == [1.0, 0.0]
    assert out["answers"][0]["reward_detail"]["reference"] == "85"
