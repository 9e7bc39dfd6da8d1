"""Every error path: JSON shape, status, a message that says what to fix, no state change."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from gmts_core.model.loading import load_model
from tests.app.api_helpers import TINY, given_body, make_settings


def _error(r, status: int, code: str) -> str:  # noqa: ANN001
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt": "x"}, "reward"),
        (given_body(selection={"ratio": 1.5}), "body.selection.ratio"),
        (given_body(selection={"methods": ["nope"]}), "body.selection.methods"),
        (given_body(selection={"scope": "world"}), "body.selection.scope"),
        (given_body(advantage="ppo"), "body.advantage"),
        (given_body(loss_aggregation="sum"), "body.loss_aggregation"),
        (given_body(reward={"kind": "vibes", "reference": 1}, rewards=None), "body.reward.kind"),
        (given_body(num_samples=3), "answers or num_samples"),
        (given_body(rewards=[1, 0]), "rewards has 2 values for 3 answers"),
        (given_body(answers=["a", ""]), "body.answers.1"),
        (given_body(temperature=0), "body.temperature"),
        (given_body(unknown_field=1), "body.unknown_field"),
        ({**given_body(), "groups": [{"prompt": "y", "rewards": [1]}]}, "not both"),
        ({}, "prompt"),
    ],
)
def test_validation_errors_name_the_field(client: TestClient, body: dict, field: str) -> None:
    message = _error(client.post("/v1/analyze", json=body), 422, "validation_error")
    assert field in message


def test_unknown_registry_name_lists_valid_ones(client: TestClient) -> None:
    r = client.post("/v1/analyze", json=given_body(selection={"methods": ["nope"]}))
    message = _error(r, 422, "validation_error")
    assert "entropy" in message and "gmts" in message


def test_non_finite_json_numbers_are_rejected(client: TestClient) -> None:
    raw = b'{"prompt": "x", "answers": ["a"], "rewards": [NaN]}'
    r = client.post("/v1/analyze", content=raw, headers={"content-type": "application/json"})
    assert "body.rewards.0" in _error(r, 422, "validation_error")


@pytest.mark.parametrize(
    ("content", "ctype"), [(b"{not json", "application/json"), (b"prompt=x", "text/plain")]
)
def test_malformed_bodies_are_422(client: TestClient, content: bytes, ctype: str) -> None:
    r = client.post("/v1/analyze", content=content, headers={"content-type": ctype})
    _error(r, 422, "validation_error")


def test_unknown_model_is_404_listing_available(client: TestClient) -> None:
    message = _error(
        client.post("/v1/analyze", json=given_body(model="nope")), 404, "model_not_found"
    )
    assert TINY in message and "tiny-arith" in message


def test_unknown_route_and_method_have_the_error_shape(client: TestClient) -> None:
    _error(client.get("/v1/nothing-here"), 404, "not_found")
    _error(client.get("/v1/analyze"), 405, "method_not_allowed")


ONE = {"prompt": "q", "answers": ["a"], "rewards": [1]}


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"prompt": "x" * 401}, "MAX_PROMPT_CHARS"),
        ({"answers": ["a"] * 17, "rewards": [1] * 17}, "MAX_ANSWERS"),
        ({"answers": ["a" * 401], "rewards": [1]}, "MAX_ANSWER_CHARS"),
        ({"answers": None, "rewards": None, "num_samples": 17}, "MAX_ANSWERS"),
        (
            {"answers": None, "rewards": None, "num_samples": 2, "max_new_tokens": 9},
            "MAX_NEW_TOKENS",
        ),
        ({"top_alternatives": 21}, "MAX_TOP_ALTERNATIVES"),
        ({"prompt": None, "answers": None, "rewards": None, "groups": [ONE] * 33}, "MAX_GROUPS"),
    ],
)
def test_request_limits_are_413(client: TestClient, overrides: dict, setting: str) -> None:
    body = {k: v for k, v in given_body(**overrides).items() if v is not None}
    if "rewards" not in body and "groups" not in body:
        body["reward"] = {"kind": "numeric", "reference": "3"}
    message = _error(client.post("/v1/analyze", json=body), 413, "limit_exceeded")
    assert f"GMTS_{setting}" in message
    assert client.get("/readyz").json()["loaded"] is False  # refused before loading anything


def test_total_token_limit_is_413(model_root: Path) -> None:
    with TestClient(create_app(make_settings(model_root, max_total_tokens=30))) as c:
        long = given_body(answers=["zqxjkvbpwy"] * 3)  # rare letters: one token each
        assert "GMTS_MAX_TOTAL_TOKENS" in _error(
            c.post("/v1/analyze", json=long), 413, "limit_exceeded"
        )
        sampled = {
            "prompt": "q",
            "num_samples": 8,
            "max_new_tokens": 8,
            "reward": {"kind": "exact", "reference": "a"},
        }
        _error(c.post("/v1/analyze", json=sampled), 413, "limit_exceeded")
        assert c.post("/v1/analyze", json=given_body(answers=["a", "b", "c"])).status_code == 200


def test_body_over_the_byte_limit_is_413(client: TestClient) -> None:
    r = client.post("/v1/analyze", json=given_body(prompt="x" * 30_000))
    assert "GMTS_MAX_BODY_BYTES" in _error(r, 413, "payload_too_large")


def test_streamed_body_over_the_limit_is_413(client: TestClient) -> None:
    def chunks():
        yield b'{"prompt": "'
        for _ in range(30):
            yield b"x" * 1000
        yield b'"}'

    r = client.post("/v1/analyze", content=chunks(), headers={"content-type": "application/json"})
    _error(r, 413, "payload_too_large")


@pytest.fixture(scope="module")
def odd_root(tmp_path_factory: pytest.TempPathFactory, model_root: Path) -> Path:
    """A root with a model whose logits are NaN and one whose weights are a pickle only."""
    root = tmp_path_factory.mktemp("odd")
    lm = load_model(model_root / TINY)
    with torch.no_grad():
        lm.model.get_output_embeddings().weight.fill_(float("nan"))
    lm.model.save_pretrained(root / "nan-model")
    lm.tokenizer.save_pretrained(root / "nan-model")
    pickled = root / "pickle-model"
    shutil.copytree(model_root / TINY, pickled)
    (pickled / "model.safetensors").unlink()
    marker = root / "pickle-was-loaded"
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps(_Touch(str(marker))))
    return root


class _Touch:
    """Unpickling this creates a file: proof that a pickle was (not) loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # noqa: ANN204
        return (open, (self.path, "w"))


def test_non_finite_logits_are_a_clear_422(model_root: Path, odd_root: Path) -> None:
    with TestClient(create_app(make_settings(model_root, model_roots=[model_root, odd_root]))) as c:
        r = c.post("/v1/analyze", json=given_body(model="nan-model"))
        assert "NaN" in _error(r, 422, "non_finite_logits")
        assert c.get("/healthz").status_code == 200
        assert c.post("/v1/analyze", json=given_body()).status_code == 200


def test_only_safetensors_are_loaded(model_root: Path, odd_root: Path) -> None:
    with TestClient(create_app(make_settings(model_root, model_roots=[odd_root]))) as c:
        r = c.post("/v1/analyze", json=given_body(model="pickle-model"))
        message = _error(r, 422, "model_load_failed")
    assert not (odd_root / "pickle-was-loaded").exists()
    assert "pickle-model" in message
    assert str(odd_root) not in message and str(odd_root.resolve()) not in message


def test_bad_requests_change_no_state(client: TestClient) -> None:
    bad = [
        given_body(model="nope"),
        given_body(selection={"ratio": 0}),
        given_body(top_alternatives=99),
    ]
    for body in bad:
        assert client.post("/v1/analyze", json=body).status_code in (404, 413, 422)
    assert client.app.state.services.models.cache.loaded_names() == []
    assert client.app.state.services.jobs.running == 0


def test_unknown_query_parameters_are_422_naming_them(client: TestClient) -> None:
    r = client.post("/v1/analyze/export?fromat=csv", json={"prompt": "Q", "answers": ["a"]})
    assert r.status_code == 422
    message = r.json()["error"]["message"]
    assert "fromat" in message and "format" in message  # the unknown one and the valid one
    assert client.get("/v1/models?x=1").status_code == 422
    assert client.get("/v1/models").status_code == 200
