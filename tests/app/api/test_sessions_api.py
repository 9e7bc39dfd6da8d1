"""/v1/sessions through TestClient: create, step, history, reset, delete, analyze with a session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.container import build_services
from tests.app.api_helpers import make_settings

PROMPTS = [
    {"prompt": "The answer is", "reference": "[aeiou]", "reward_kind": "regex"},
    {"prompt": "Q: 47+38=?\nA:", "reference": "[0-9]", "reward_kind": "regex"},
]
KNOBS = {"group_size": 4, "max_new_tokens": 8, "learning_rate": 0.05}


def _create(client: TestClient, **body: Any) -> str:
    r = client.post("/v1/sessions", json={**KNOBS, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def _assert_error(r: Any, status: int, code: str, words: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and words in err["message"], err


def test_create_step_history_reset_delete(client: TestClient) -> None:
    sid = _create(client, method="gmts", seed=3)
    info = client.get(f"/v1/sessions/{sid}").json()
    assert info["steps_done"] == 0 and info["policy_kind"] == "full"
    assert info["settings"]["method"] == "gmts" and info["settings"]["group_size"] == 4

    r = client.post(f"/v1/sessions/{sid}/step", json={"steps": 2, "prompts": PROMPTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["steps_done"] == 2 and [s["step"] for s in body["steps"]] == [1, 2]
    metrics = body["steps"][0]
    assert {"loss", "kl", "grad_norm", "clip_low_fraction", "wasted_share"} <= set(metrics)
    assert set(metrics["wasted_share"]) >= {"gmts", "entropy"}
    tokens = [t for a in body["last_batch"] for t in a["tokens"]]
    assert tokens and {"text", "selected", "logprob_before", "logprob_after"} <= set(tokens[0])
    assert all(t["logprob_after"] is None for t in tokens)  # one more pass: off unless asked

    knobs = {"method": "entropy", "measure_logprob_after": True}
    r = client.post(f"/v1/sessions/{sid}/step", json={**knobs, "prompts": PROMPTS})
    assert r.json()["steps"][0]["method"] == "entropy"  # a knob for this request only
    tokens = [t for a in r.json()["last_batch"] for t in a["tokens"]]
    assert all(isinstance(t["logprob_change"], float) for t in tokens)
    history = client.get(f"/v1/sessions/{sid}").json()
    assert [h["step"] for h in history["history"]] == [1, 2, 3]
    assert history["settings"]["method"] == "gmts"
    # measured on the first prompt's answers only (the Train tab's: the prompts it draws)
    knobs = {"measure_logprob_after": True, "logprob_after_prompts": 1}
    answers = client.post(f"/v1/sessions/{sid}/step", json={**knobs, "prompts": PROMPTS}).json()
    groups = [a["group"] for a in answers["last_batch"]]
    assert len(set(groups)) == 2
    for a in answers["last_batch"]:
        measured = [t["logprob_change"] is not None for t in a["tokens"]]
        assert measured == [a["group"] == groups[0]] * len(measured)

    r = client.post(f"/v1/sessions/{sid}/reset")
    assert r.status_code == 200 and r.json()["steps_done"] == 0
    again = client.post(f"/v1/sessions/{sid}/step", json={"steps": 2, "prompts": PROMPTS}).json()
    assert again["steps"][0]["reward_mean"] == body["steps"][0]["reward_mean"]
    assert again["steps"][1]["loss"] == body["steps"][1]["loss"]  # reset replays exactly

    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    _assert_error(client.get(f"/v1/sessions/{sid}"), 404, "unknown_session", "deleted")


def test_demo_batch_steps_and_evaluation(client: TestClient) -> None:
    sid = _create(client, prompts_per_step=2)
    r = client.post(f"/v1/sessions/{sid}/step", json={})
    assert r.status_code == 200, r.text
    assert r.json()["steps"][0]["num_prompts"] == 2
    assert all(a["prompt"].startswith("Q: ") for a in r.json()["last_batch"])
    r = client.post(f"/v1/sessions/{sid}/evaluate", json={"num_problems": 3})
    assert r.status_code == 200, r.text
    assert r.json()["num_problems"] == 3 and 0 <= r.json()["accuracy"] <= 1
    assert client.get(f"/v1/sessions/{sid}").json()["evaluations"][0]["step"] == 1


class FakeClock:
    """The session store's clock, moved by the test instead of waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_unknown_and_expired_sessions_are_404(model_root: Path) -> None:
    clock = FakeClock()
    services = build_services(make_settings(model_root, session_ttl_s=60), clock)
    with TestClient(create_app(services=services)) as client:
        r = client.post("/v1/sessions/nope/step", json={})
        _assert_error(r, 404, "unknown_session", "does not exist")
        sid = _create(client)
        clock.now = 59
        assert client.get(f"/v1/sessions/{sid}").status_code == 200  # a use refreshes the TTL
        clock.now = 59 + 61
        r = client.post(f"/v1/sessions/{sid}/step", json={"prompts": PROMPTS})
        _assert_error(r, 404, "unknown_session", "expired")
        _assert_error(client.delete(f"/v1/sessions/{sid}"), 404, "unknown_session", "expired")


def test_bad_input_is_refused_with_a_clear_message(client: TestClient) -> None:
    r = client.post("/v1/sessions", json={"method": "nope"})
    _assert_error(r, 422, "validation_error", "gmts")  # lists the valid methods
    _assert_error(
        client.post("/v1/sessions", json={"model": "missing"}), 404, "model_not_found", ""
    )
    _assert_error(client.post("/v1/sessions", json={"ratio": 2}), 422, "validation_error", "ratio")
    sid = _create(client)
    r = client.post(f"/v1/sessions/{sid}/step", json={"steps": 1000})
    _assert_error(r, 413, "limit_exceeded", "GMTS_MAX_SESSION_STEPS")
    r = client.post(f"/v1/sessions/{sid}/step", json={"group_size": 64, "prompts_per_step": 9})
    _assert_error(r, 413, "limit_exceeded", "GMTS_MAX_STEP_ANSWERS")  # 576 answers > 512
    r = client.post(f"/v1/sessions/{sid}/step", json={"prompts_per_step": 65})
    _assert_error(r, 422, "validation_error", "prompts_per_step")  # the schema's own bound
    r = client.post(f"/v1/sessions/{sid}/step", json={"prompts": [{"prompt": "x"}]})
    _assert_error(r, 422, "validation_error", "reference")
    r = client.post(f"/v1/sessions/{sid}/step", json={"unknown": 1})
    _assert_error(r, 422, "validation_error", "unknown")


def _logprobs(client: TestClient, session_id: str | None) -> list[float]:
    body = {
        "prompt": "The answer is",
        "answers": [" yes it is", " no"],
        "rewards": [1, 0],
        "top_alternatives": 0,
    }
    if session_id:
        body["session_id"] = session_id
    r = client.post("/v1/analyze", json=body)
    assert r.status_code == 200, r.text
    return [t["logprob"] for a in r.json()["answers"] for t in a["tokens"]]


def test_analyze_with_a_session_uses_its_policy(client: TestClient) -> None:
    base = _logprobs(client, None)
    sid = _create(client, ratio=1.0)
    assert _logprobs(client, sid) == base  # a new session starts at the base weights
    client.post(f"/v1/sessions/{sid}/step", json={"steps": 2, "prompts": PROMPTS})
    trained = _logprobs(client, sid)
    assert trained != base
    assert _logprobs(client, None) == base  # the base model is untouched
    other = _create(client)
    assert _logprobs(client, other) == base  # and other sessions too
    client.post(f"/v1/sessions/{sid}/reset")
    assert _logprobs(client, sid) == base
    r = client.post("/v1/analyze", json={"prompt": "x", "answers": ["y"], "rewards": [1],
                                         "session_id": "nope"})  # fmt: skip
    _assert_error(r, 404, "unknown_session", "does not exist")


def test_session_cap_evicts_the_least_recently_used(model_root: Path) -> None:
    app = create_app(make_settings(model_root, max_sessions=2))
    with TestClient(app) as client:
        first, second = _create(client), _create(client)
        client.get(f"/v1/sessions/{first}")
        third = _create(client)
        _assert_error(client.get(f"/v1/sessions/{second}"), 404, "unknown_session", "evicted")
        assert client.get(f"/v1/sessions/{first}").status_code == 200
        assert client.get(f"/v1/sessions/{third}").status_code == 200


def test_warmup_ramps_the_learning_rate_across_step_requests(client: TestClient) -> None:
    sid = _create(client, warmup_steps=4)
    assert client.get(f"/v1/sessions/{sid}").json()["settings"]["warmup_steps"] == 4
    for _ in range(2):
        r = client.post(f"/v1/sessions/{sid}/step", json={"steps": 2, "prompts": PROMPTS})
        assert r.status_code == 200, r.text
    rates = [h["learning_rate"] for h in client.get(f"/v1/sessions/{sid}").json()["history"]]
    assert rates == pytest.approx([0.0125, 0.025, 0.0375, 0.05])
    # a cosine decay over the next 2 steps, asked for on a step request: 3/4 and 1/4 of the
    # peak, then 0
    r = client.post(f"/v1/sessions/{sid}/step", json={"steps": 3, "prompts": PROMPTS,
                                                      "decay_steps": 2})  # fmt: skip
    assert r.status_code == 200, r.text
    rates = [h["learning_rate"] for h in client.get(f"/v1/sessions/{sid}").json()["history"]]
    assert rates[4:] == pytest.approx([0.0375, 0.0125, 0.0])
    _assert_error(
        client.post(f"/v1/sessions/{sid}/step", json={"warmup_steps": -1}),
        422,
        "validation_error",
        "warmup_steps",
    )
