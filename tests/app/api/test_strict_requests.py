"""Strict requests: contradictory or meaningless fields, duplicate keys, lax scalars, k = 0.

Every pair of fields a request may not hold together is refused with a 422 naming both
(walked from the pair tables, so a new pair is tested too); every boolean field of every request
model refuses ``0``, ``1`` and ``"true"``; a repeated JSON key is a 422 naming it; a ratio that
selects nothing is refused. The OpenAPI schema states the same rules: the bodies the server
refuses for a cross-field rule are invalid under the published schema, the ones it accepts
valid (checked with a JSON Schema validator).
"""

from __future__ import annotations

import json
import typing
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from app.schemas.analyze_request import GROUP_PAIRS, REQUEST_PAIRS, AnalyzeRequest
from app.schemas.gradcheck import GradcheckRequest
from app.schemas.sessions import SessionCreateRequest, SessionEvalRequest, SessionStepRequest
from tests.app.api_helpers import given_body

PAIR_VALUES: dict[str, Any] = {
    "answers": [" 85", " 75", " 85"],
    "answer_ids": [[5, 6], [7], [8]],
    "num_samples": 3,
    "top_p": 0.9,
    "max_new_tokens": 4,
    "reward": {"kind": "numeric", "reference": "85"},
    "rewards": [1, 0, 1],
    "model": "tiny-llama",
    "session_id": "abc",
}


def _group_with(a: str, b: str) -> dict[str, Any]:
    group: dict[str, Any] = {"prompt": "Q: 47+38=?\nA:", a: PAIR_VALUES[a], b: PAIR_VALUES[b]}
    if "reward" not in group and "rewards" not in group:
        group["rewards"] = [1, 0, 1]
    return group


def _message(r: Any) -> str:
    assert r.status_code == 422, r.text
    return str(r.json()["error"]["message"])


@pytest.mark.parametrize(
    ("a", "b", "_why"), GROUP_PAIRS, ids=[f"{a}+{b}" for a, b, _ in GROUP_PAIRS]
)
def test_every_group_pair_is_refused_naming_both(
    client: TestClient, a: str, b: str, _why: str
) -> None:
    r = client.post("/v1/analyze", json={"groups": [_group_with(a, b)]})
    message = _message(r)
    assert a in message and b in message, message


SINGLE_PAIRS = [(a, b) for a, b, _ in REQUEST_PAIRS if "groups" not in (a, b)]


@pytest.mark.parametrize(("a", "b"), SINGLE_PAIRS, ids=[f"{a}+{b}" for a, b in SINGLE_PAIRS])
def test_every_single_form_pair_is_refused_naming_both(client: TestClient, a: str, b: str) -> None:
    body = _group_with(a, b)
    message = _message(client.post("/v1/analyze", json=body))
    assert a in message and b in message, message
    # the same body through the other routes that take an analyze request
    assert client.post("/v1/analyze/export?format=csv", json=body).status_code == 422
    assert client.post("/v1/gradcheck", json=body).status_code == 422


def test_answers_with_answer_ids_is_refused_even_when_counts_match(client: TestClient) -> None:
    """The defect: the answers were silently ignored and the tokens came from the ids."""
    group = {"prompt": "Q:", "answers": ["a", "b"], "answer_ids": [[5], [6]], "rewards": [1, 0]}
    message = _message(client.post("/v1/analyze", json={"groups": [group]}))
    assert "answers" in message and "answer_ids" in message


def test_batch_sampling_fields_when_no_group_samples_are_refused(client: TestClient) -> None:
    group = {"prompt": "Q:", "answers": ["a", "b"], "rewards": [1, 0]}
    for name, value in (("num_samples", 2), ("top_p", 0.5), ("max_new_tokens", 3)):
        message = _message(client.post("/v1/analyze", json={"groups": [group], name: value}))
        assert name in message and "answers" in message
    sampled = {"prompt": "Q:", "reward": {"kind": "numeric", "reference": "2"}}
    mixed = {"groups": [group, sampled], "num_samples": 2, "max_new_tokens": 2}
    assert client.post("/v1/analyze", json=mixed).status_code == 200  # a default for one group


@pytest.mark.parametrize(
    ("path", "body", "names"),
    [
        ("/v1/sessions", {"policy": "full", "lora_rank": 4}, ("policy", "lora_rank")),
        ("/v1/sessions", {"reselect": True, "inner_steps": 1}, ("reselect", "inner_steps")),
        ("/v1/sessions/x/step", {"reselect": True, "inner_steps": 1}, ("reselect", "inner_steps")),
        (
            "/v1/sessions/x/evaluate",
            {"temperature": 0, "samples_per_problem": 4},
            ("temperature", "samples_per_problem"),
        ),
    ],
)
def test_meaningless_session_combinations_are_refused(
    client: TestClient, path: str, body: dict, names: tuple[str, ...]
) -> None:
    message = _message(client.post(path, json=body))
    assert all(n in message for n in names), message


# --- booleans and other lax scalars -----------------------------------------------------------

REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "/v1/analyze": AnalyzeRequest,
    "/v1/gradcheck": GradcheckRequest,
    "/v1/sessions": SessionCreateRequest,
    "/v1/sessions/x/step": SessionStepRequest,
    "/v1/sessions/x/evaluate": SessionEvalRequest,
}


def _bool_fields(model: type[BaseModel]) -> list[str]:
    def is_bool(annotation: Any) -> bool:
        return annotation is bool or any(is_bool(a) for a in typing.get_args(annotation))

    return [n for n, f in model.model_fields.items() if is_bool(f.annotation)]


BOOL_CASES = [
    (path, name, value)
    for path, model in REQUEST_MODELS.items()
    for name in _bool_fields(model)
    for value in (0, 1, "true", "no")
]


def test_every_request_model_has_its_boolean_fields_covered() -> None:
    names = {name for _, name, _ in BOOL_CASES}
    expected = {"chat_template", "answer_special_tokens", "include_tokens"}
    expected |= {"reselect", "measure_logprob_after"}
    assert expected <= names, names


@pytest.mark.parametrize(("path", "name", "value"), BOOL_CASES)
def test_booleans_are_strictly_typed(client: TestClient, path: str, name: str, value: Any) -> None:
    base = given_body() if path in ("/v1/analyze", "/v1/gradcheck") else {}
    r = client.post(path, json={**base, name: value})
    assert r.status_code == 422, r.text
    assert name in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"seed": "3"}, "seed"),
        ({"top_alternatives": "2"}, "top_alternatives"),
        ({"temperature": "1.0"}, "temperature"),
        ({"selection": {"ratio": "0.2"}}, "ratio"),
        ({"rewards": [1, "0", 1]}, "rewards[1]"),
    ],
)
def test_numbers_given_as_text_are_refused(client: TestClient, overrides: dict, field: str) -> None:
    message = _message(client.post("/v1/analyze", json=given_body(**overrides)))
    assert field in message


def test_measure_logprob_after_zero_is_refused(client: TestClient) -> None:
    """The defect: ``"measure_logprob_after": 0`` was read as false."""
    message = _message(client.post("/v1/sessions/x/step", json={"measure_logprob_after": 0}))
    assert "measure_logprob_after" in message


# --- a ratio that selects nothing -------------------------------------------------------------


@pytest.mark.parametrize("ratio", [1e-300, 5e-324, 1e-7])
def test_a_ratio_selecting_no_token_is_refused(client: TestClient, ratio: float) -> None:
    # the schemas carry the bound (MIN_RATIO), so every route refuses it naming the field
    message = _message(client.post("/v1/analyze", json=given_body(selection={"ratio": ratio})))
    assert "selection.ratio" in message and "0.000001" in message
    for path in ("/v1/sessions", "/v1/sessions/x/step"):
        message = _message(client.post(path, json={"ratio": ratio}))
        assert "ratio" in message and "0.000001" in message
    assert client.get(f"/v1/runs/r/steps/1?ratio={ratio}").status_code == 422


def test_the_smallest_allowed_ratio_still_selects_a_token(client: TestClient) -> None:
    r = client.post("/v1/analyze", json=given_body(selection={"ratio": 1e-6}))
    assert r.status_code == 200, r.text
    selected = [t["selected"]["gmts"] for a in r.json()["answers"] for t in a["tokens"]]
    assert sum(selected) == 1


# --- duplicate keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ('{"prompt": "a", "prompt": "b", "answers": ["x"], "rewards": [1]}', "prompt"),
        (
            '{"prompt": "a", "answers": ["x"], "rewards": [1], '
            '"selection": {"ratio": 0.2, "ratio": 0.9}}',
            "ratio",
        ),
        (
            '{"groups": [{"prompt": "a", "rewards": [1], "answers": ["x"], "answers": ["y"]}]}',
            "answers",
        ),
    ],
)
def test_duplicate_json_keys_are_refused(client: TestClient, raw: str, key: str) -> None:
    for path in ("/v1/analyze", "/v1/analyze/export", "/v1/sessions"):
        r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
        message = _message(r)
        assert repr(key) in message and "twice" in message
    # no content type: FastAPI still reads the body as JSON, so it is checked as well
    assert _message(client.post("/v1/analyze", content=raw.encode()))


def test_repeated_keys_in_different_objects_are_fine(client: TestClient) -> None:
    group = {"prompt": "Q:", "answers": [" 85", " 75"], "rewards": [1, 0]}
    body = {"groups": [group, dict(group)]}
    raw = json.dumps(body)
    r = client.post("/v1/analyze", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text


# --- the rules in the published schema --------------------------------------------------------


def _validator(client: TestClient, name: str) -> Any:
    spec = client.get("/openapi.json").json()
    return jsonschema_rs.validator_for(
        {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    )


def test_schema_states_prompt_or_groups_and_the_pairs(client: TestClient) -> None:
    check = _validator(client, "AnalyzeRequest")
    good = given_body()
    batch = {"groups": [{"prompt": "Q:", "answers": [" 85"], "rewards": [1]}]}
    assert check.is_valid(good) and check.is_valid(batch)
    assert check.is_valid({**batch, "prompt": None})  # null is "not given", for both
    assert not check.is_valid({**good, "groups": batch["groups"]})  # both forms
    assert not check.is_valid({"answers": ["x"], "rewards": [1]})  # neither
    for a, b, _ in REQUEST_PAIRS:
        if "groups" in (a, b):
            continue
        body = _group_with(a, b)
        assert not check.is_valid(body), (a, b)
    for a, b, _ in GROUP_PAIRS:
        assert not check.is_valid({"groups": [_group_with(a, b)]}), (a, b)


def test_schema_lists_registry_names_as_enums(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    props = spec["AnalyzeRequest"]["properties"]
    assert "token_mean" in props["loss_aggregation"]["enum"]
    assert "grpo" in props["advantage"]["enum"]
    assert "gmts" in spec["SelectionOptions"]["properties"]["methods"]["items"]["enum"]
    assert "numeric" in spec["RewardRule"]["properties"]["kind"]["enum"]
    method = spec["SessionCreateRequest"]["properties"]["method"]["anyOf"]
    assert any("gmts" in branch.get("enum", []) for branch in method)
    check = _validator(client, "AnalyzeRequest")
    assert not check.is_valid(given_body(loss_aggregation="sum"))


def test_schema_states_the_session_rules(client: TestClient) -> None:
    create = _validator(client, "SessionCreateRequest")
    assert create.is_valid({"policy": "lora", "lora_rank": 4})
    assert not create.is_valid({"policy": "full", "lora_rank": 4})
    assert not create.is_valid({"reselect": True, "inner_steps": 1})
    evaluate = _validator(client, "SessionEvalRequest")
    assert evaluate.is_valid({"temperature": 0})
    assert not evaluate.is_valid({"temperature": 0, "samples_per_problem": 3})


def test_a_query_parameter_given_twice_is_refused(client: TestClient) -> None:
    r = client.post("/v1/analyze/export?format=csv&format=json", json=given_body())
    message = _message(r)
    assert "format" in message and "more than once" in message
