"""POST /v1/analyze/export and the export service: CSV rows per token, exact JSON."""

from __future__ import annotations

import csv
import io
import json

from fastapi.testclient import TestClient

from app.services.export import to_csv
from tests.app.api_helpers import given_body


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_has_one_row_per_token_with_answer_fields(client: TestClient) -> None:
    body = client.post("/v1/analyze", json=given_body()).json()
    r = client.post("/v1/analyze/export?format=csv", json=given_body())
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == 'attachment; filename="gmts-analysis.csv"'
    rows = _rows(r.text)
    tokens = [(a, t) for a in body["answers"] for t in a["tokens"]]
    assert len(rows) == len(tokens)
    for row, (a, t) in zip(rows, tokens, strict=True):
        assert int(row["answer_index"]) == a["index"] and row["group_index"] == "0"
        assert float(row["reward"]) == a["reward"] and float(row["advantage"]) == a["advantage"]
        assert int(row["position"]) == t["position"] and int(row["id"]) == t["id"]
        for f in ("logprob", "prob", "entropy", "grad_norm", "grad_proxy"):
            assert float(row[f]) == t[f]
        assert int(row["rank_gmts"]) == t["ranks"]["gmts"]
        assert row["selected_entropy"] == str(t["selected"]["entropy"])
        assert len(json.loads(row["alternatives"])) == len(t["alternatives"])


def test_json_export_is_the_analyze_body(client: TestClient) -> None:
    body = client.post("/v1/analyze", json=given_body()).json()
    r = client.post("/v1/analyze/export?format=json", json=given_body())
    assert r.headers["content-disposition"] == 'attachment; filename="gmts-analysis.json"'
    assert r.json() == body


def test_unknown_format_is_422(client: TestClient) -> None:
    r = client.post("/v1/analyze/export?format=xlsx", json=given_body())
    assert r.status_code == 422 and "format" in r.json()["error"]["message"]


def test_batch_csv_carries_group_index(client: TestClient) -> None:
    groups = [
        {"prompt": "Q: 1+2=?\nA:", "answers": [" 3", " 4"], "rewards": [1, 0]},
        {"prompt": "Q: 4+4=?\nA:", "answers": [" 8"], "rewards": [1]},
    ]
    body = client.post("/v1/analyze", json={"groups": groups}).json()
    rows = _rows(to_csv(body))
    n1 = sum(len(a["tokens"]) for a in body["groups"][1]["answers"])
    assert [r["group_index"] for r in rows].count("1") == n1
    assert len(rows) == body["summary"]["num_tokens"]


def test_csv_neutralizes_formula_cells() -> None:
    token = {
        "position": 0, "id": 1, "text": "=HYPERLINK(1)", "logprob": -1.0, "prob": 0.3,
        "entropy": 1.0, "grad_norm": 0.5, "grad_proxy": 0.1, "scores": {"gmts": 0.1},
        "ranks": {"gmts": 1}, "selected": {"gmts": True}, "alternatives": [],
    }  # fmt: skip
    answer = {"index": 0, "reward": 1.0, "advantage": -0.5, "weight": 1.0, "finished": True}
    body = {"prompt": "p", "answers": [{**answer, "tokens": [token]}], "settings": {}}
    row = _rows(to_csv(body))[0]
    assert row["text"] == "'=HYPERLINK(1)"
    assert float(row["advantage"]) == -0.5  # numbers are left alone
