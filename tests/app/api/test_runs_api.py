"""GET /v1/runs...: runs under GMTS_RUN_ROOTS (confined like model roots), a run's steps, a
step's groups analysed on demand (TRL dump) or as the trainer logged them (applied mask)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from gmts_core.runs import open_run
from tests.app.api_helpers import make_settings

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for name in ("trl", "verl", "logged", "run.jsonl"):
        src = DATA / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    (root / "notes.txt").write_text("not a run")
    outside = tmp_path_factory.mktemp("outside")
    shutil.copytree(DATA / "verl", outside / "verl")
    (root / "escape").symlink_to(outside / "verl")  # a symlink leading out of the root
    return root


@pytest.fixture(scope="module")
def client(run_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(
        tmp_path_factory.mktemp("models"),
        run_roots=[run_root],
        default_model="tiny-arith",
        max_total_tokens=4096,
        run_max_step_answers=12,
        run_list_wait_s=300,  # a listing answers once every entry is indexed (event-driven)
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_lists_the_runs_under_the_roots_only(client: TestClient) -> None:
    body = client.get("/v1/runs").json()
    runs = {r["id"]: r for r in body["runs"]}
    assert set(runs) == {"trl", "verl", "logged", "run.jsonl"}
    assert runs["trl"]["format"] == "trl" and not runs["trl"]["logged"]
    assert runs["logged"]["format"] == "gmts_trainer_log" and runs["logged"]["logged"]
    assert (runs["verl"]["first_step"], runs["verl"]["last_step"]) == (1, 3)
    assert "areal" in body["formats"]


@pytest.mark.parametrize("run_id", ["escape", "..", "notes.txt", "nope", "%2e%2e", "a~b"])
def test_unknown_or_escaping_runs_are_404(client: TestClient, run_id: str) -> None:
    r = client.get(f"/v1/runs/{run_id}")
    assert r.status_code in (404, 422) if run_id == "notes.txt" else r.status_code == 404
    if r.status_code == 404 and run_id != "..":
        assert r.json()["error"]["code"] in ("unknown_run", "not_found")


def test_overview_numbers_come_from_the_files(client: TestClient) -> None:
    body = client.get("/v1/runs/trl").json()
    assert body["steps"] == [1, 2, 3]
    for row in body["overview"]:
        df = pd.read_parquet(
            DATA / "trl" / "completions" / f"completions_{row['step']:05d}.parquet"
        )
        assert row["num_answers"] == len(df)
        assert row["reward_mean"] == pytest.approx(df["numeric_reward"].mean())


def test_a_trl_step_is_analysed_on_demand(client: TestClient) -> None:
    r = client.get(
        "/v1/runs/trl/steps/2", params={"model": "tiny-arith", "methods": "entropy,gmts"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["mode"], body["previous"], body["next"]) == ("analysis", 1, 3)
    df = pd.read_parquet(DATA / "trl" / "completions" / "completions_00002.parquet")
    groups = body["analysis"]["groups"]
    assert [g["prompt"] for g in groups] == list(dict.fromkeys(df["prompt"]))
    assert [a["text"] for g in groups for a in g["answers"]] == [
        c for p in dict.fromkeys(df["prompt"]) for c in df[df["prompt"] == p]["completion"]
    ]
    assert [a["reward"] for g in groups for a in g["answers"]] == [
        r for p in dict.fromkeys(df["prompt"]) for r in df[df["prompt"] == p]["numeric_reward"]
    ]
    report = body["report"]
    assert report["gradient_coverage"] == pytest.approx(
        body["analysis"]["summary"]["gradient_coverage"]
    )
    known = client.get("/v1/runs/trl").json()["reports"]
    assert [k["step"] for k in known] == [2]  # the overview now charts the analysed step


def test_a_trainer_log_step_shows_the_applied_mask(client: TestClient) -> None:
    body = client.get("/v1/runs/logged/steps/1").json()
    assert body["mode"] == "logged" and body["analysis"] is None
    df = pd.read_parquet(DATA / "logged" / "gmts_selection" / "selection_00001.parquet")
    tokens = [t for g in body["logged"] for a in g["answers"] for t in a["tokens"]]
    assert len(tokens) == len(df)
    assert sum(t["selected"]["applied"] for t in tokens) == int(df["selected"].sum())
    step = open_run(DATA / "logged").step(1)  # the reader is checked against TRL's mask
    expected = [f for g in step.groups for flags in g.token_columns["selected"] for f in flags]
    assert [t["selected"]["applied"] for t in tokens] == expected
    assert [t["id"] for t in tokens] == [i for g in step.groups for ids in g.token_ids for i in ids]
    overview = client.get("/v1/runs/logged").json()
    assert [r["step"] for r in overview["reports"]] == [1, 2]
    assert all(r["mode"] == "logged" for r in overview["reports"])


def test_bad_steps_and_limits_are_clear_4xx(client: TestClient) -> None:
    r = client.get("/v1/runs/verl/steps/99")
    assert r.status_code == 422 and "no step 99" in r.json()["error"]["message"]
    r = client.get("/v1/runs/verl/steps/1", params={"methods": "entropy,nope"})
    assert r.status_code == 422 and "nope" in r.json()["error"]["message"]
    r = client.get("/v1/runs/verl/steps/1", params={"ratio": 0})
    assert r.status_code == 422


def test_a_step_over_the_answer_limit_is_413(run_root: Path, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, run_roots=[run_root], run_max_step_answers=4)
    with TestClient(create_app(settings)) as c:
        r = c.get("/v1/runs/verl/steps/1", params={"model": "tiny-arith"})
    assert r.status_code == 413 and "gmts analyze-run" in r.json()["error"]["message"]


def test_the_ui_backends_agree_local_and_remote(run_root: Path, tmp_path: Path) -> None:
    from app.ui.local_backend import LocalBackend
    from app.ui.remote_backend import RemoteBackend
    from tests.app.api_helpers import LiveServer

    app = create_app(
        make_settings(
            tmp_path, run_roots=[run_root], default_model="tiny-arith", run_list_wait_s=300
        )
    )
    local = LocalBackend(app.state.services)
    with LiveServer(app) as server:
        remote = RemoteBackend(server.url)
        assert remote.runs() == local.runs()
        assert remote.run_overview("logged") == local.run_overview("logged")
        params = {"model": "tiny-arith", "ratio": 0.2, "methods": "entropy,gmts"}
        assert remote.run_step("logged", 2, params) == local.run_step("logged", 2, params)


@pytest.mark.parametrize("run_id", ["trl", "logged"])
def test_metrics_over_steps_are_computed_in_the_background(client: TestClient, run_id: str) -> None:
    params = {"model": "tiny-arith", "methods": "entropy,gmts"}
    first = client.get(f"/v1/runs/{run_id}/metrics", params=params)
    assert first.status_code == 200, first.text
    assert first.json()["steps_total"] == len(client.get(f"/v1/runs/{run_id}").json()["steps"])
    assert client.app.state.services.run_metrics.wait(300)  # type: ignore[attr-defined]
    body = client.get(f"/v1/runs/{run_id}/metrics", params=params).json()
    assert not body["running"] and body["error"] is None
    assert body["steps_done"] == body["steps_total"] == len(body["reports"])
    report = body["reports"][-1]
    assert set(report["gradient_coverage"]) >= {"entropy", "gmts"}
    assert not report["source"].startswith("/")
    if run_id == "trl":  # the same numbers as the step view's on-demand analysis
        step = client.get(f"/v1/runs/trl/steps/{report['step']}", params=params).json()
        assert step["report"]["gradient_coverage"] == pytest.approx(report["gradient_coverage"])


def test_a_trainer_log_step_says_why_its_selections_differ(client: TestClient) -> None:
    body = client.get("/v1/runs/logged/steps/1").json()
    pairs = {(d["method_a"], d["method_b"]): d for d in body["differences"]}
    assert set(pairs) == {("applied", "entropy"), ("applied", "gmts"), ("entropy", "gmts")}
    tokens = [t for g in body["logged"] for a in g["answers"] for t in a["tokens"]]
    for (a, b), d in pairs.items():
        only_a = sum(t["selected"][a] and not t["selected"][b] for t in tokens)
        only_b = sum(t["selected"][b] and not t["selected"][a] for t in tokens)
        assert (d["only_a"], d["only_b"]) == (only_a, only_b)
        assert sum(r["count"] for r in d["reasons"]) == only_a + only_b
        for r in d["reasons"]:
            for ref in r["tokens"]:
                tok = body["logged"][ref["group"]]["answers"][ref["answer"]]["tokens"]
                flags = tok[ref["position"]]["selected"]
                assert flags[ref["selected_by"]] and flags[a] != flags[b]


def test_a_relative_root_is_read_from_the_current_folder(
    run_root: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GMTS_RUN_ROOTS=outputs (as the first-five-minutes page starts the server): the runs are
    read in worker processes that start in "/", so the root is taken from the current folder."""
    monkeypatch.chdir(run_root.parent)
    settings = make_settings(
        tmp_path_factory.mktemp("models"), run_roots=[Path(run_root.name)], run_list_wait_s=300
    )
    with TestClient(create_app(settings)) as c:
        runs = {r["id"]: r for r in c.get("/v1/runs").json()["runs"]}
        assert runs["logged"]["state"] == "ready" and runs["logged"]["num_steps"] == 2
        assert c.get("/v1/runs/logged").status_code == 200
