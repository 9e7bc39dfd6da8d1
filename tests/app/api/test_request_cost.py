"""A request's validation costs what its caps allow, not what its body holds: a list longer
than its cap is refused before any item is looked at, and a 422 names the first few problems
and how many there are (never one line per item)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.api.errors import MAX_DETAILS
from app.main import create_app
from app.schemas.request_base import MAX_LIST_ITEMS
from tests.app.api_helpers import make_settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp("models"), max_body_bytes=1_000_000)
    with TestClient(create_app(settings)) as c:
        yield c


def post(client: TestClient, body: dict[str, object]) -> tuple[int, dict[str, object], bytes]:
    data = json.dumps(body, separators=(",", ":")).encode()
    resp = client.post("/v1/analyze", content=data, headers={"content-type": "application/json"})
    return resp.status_code, resp.json(), resp.content


def test_330000_empty_answers_under_the_body_limit_are_refused_by_their_count(
    client: TestClient,
) -> None:
    body = {"prompt": "Q", "answers": [""] * 330_000, "rewards": [1]}
    assert len(json.dumps(body, separators=(",", ":"))) < 1_000_000
    status, reply, raw = post(client, body)
    assert status == 422
    assert f"answers: 330,000 items; at most {MAX_LIST_ITEMS:,}" in str(reply)
    assert len(raw) < 2_000


@pytest.mark.parametrize("field", ["answers", "rewards", "groups", "answer_ids"])
def test_every_list_of_a_request_has_its_cap_in_the_schema(client: TestClient, field: str) -> None:
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    found = [
        s["properties"][field]
        for name, s in schema.items()
        if name.endswith("Request") and field in s.get("properties", {})
    ]
    assert found
    for prop in found:
        lists = [p for p in prop.get("anyOf", [prop]) if p.get("type") == "array"]
        assert lists and all(p.get("maxItems") == MAX_LIST_ITEMS for p in lists), prop


def test_a_422_names_the_first_problems_and_counts_the_rest(client: TestClient) -> None:
    groups = [{"prompt": "", "answers": [""]} for _ in range(1_000)]
    status, reply, raw = post(client, {"groups": groups})
    assert status == 422
    error = reply["error"]
    assert isinstance(error, dict)
    assert len(error["details"]) == MAX_DETAILS
    assert "more problems" in str(error["message"])
    assert len(raw) < 5_000
