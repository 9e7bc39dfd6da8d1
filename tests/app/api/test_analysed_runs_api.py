"""GET /v1/analysed-runs...: a real TRL dump analysed by `gmts analyze-run` (its service), put
in a run root, browsed without a model: steps, a step's groups, answers and tokens, rankings
and filters across the run; what is not an analysed run (or leads out of the root) is 404."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.cli.common import services as cli_services
from app.main import create_app
from app.services.run_analysis import RunAnalysisRequest, run_analysis
from gmts_core.run_dataset.schema import step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import write_step
from tests.app.api_helpers import make_settings
from tests.patience import PATIENCE_S

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    shutil.copytree(DATA / "trl", root / "trl")
    run_analysis(
        RunAnalysisRequest(DATA / "trl", root / "trl-analysed", "tiny-arith"), cli_services().models
    )
    big = root / "synthetic"
    write_manifest(big, ("entropy", "gmts"), {})
    rng = np.random.default_rng(5)
    for step in (1, 2, 3):
        write_step(big, synthetic_step(step, 30, 8, rng))
    outside = tmp_path_factory.mktemp("outside")
    shutil.copytree(big, outside / "copy")
    (root / "escape").symlink_to(outside / "copy")  # a dataset reached by a link out of the root
    return root


@pytest.fixture(scope="module")
def client(run_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(
        tmp_path_factory.mktemp("models"),
        run_roots=[run_root],
        run_list_wait_s=300,  # a listing answers once every dataset is indexed
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_lists_analysed_runs_under_the_roots_only(client: TestClient) -> None:
    runs = {r["id"]: r for r in client.get("/v1/analysed-runs").json()["runs"]}
    assert set(runs) == {"trl-analysed", "synthetic"}
    assert runs["trl-analysed"]["num_steps"] == 3 and runs["synthetic"]["last_step"] == 3
    assert client.get("/v1/analysed-runs/escape/steps").status_code == 404
    assert client.get("/v1/analysed-runs/trl/steps").status_code == 404  # a dump, not analysed
    assert client.get("/v1/runs").status_code == 200  # the dump listing still answers


def test_steps_are_the_reports_numbers(client: TestClient, run_root: Path) -> None:
    import json

    report = json.loads((run_root / "trl-analysed" / "report.json").read_text())
    body = client.get("/v1/analysed-runs/trl-analysed/steps").json()
    assert [s["step"] for s in body["steps"]] == [r["step"] for r in report["rows"]]
    for got, row in zip(body["steps"], report["rows"], strict=True):
        assert got["num_tokens"] == row["num_tokens"]
        for m, value in row["gradient_coverage"].items():
            assert got["coverage"][m] == pytest.approx(value, rel=1e-6)
            assert got["wasted"][m] == pytest.approx(row["wasted_share"][m], rel=1e-6)


def test_a_step_opens_group_by_group_down_to_its_tokens(client: TestClient, run_root: Path) -> None:
    base = "/v1/analysed-runs/trl-analysed/steps/2"
    groups = client.get(f"{base}/groups", params={"limit": 2}).json()
    assert [g["group"] for g in groups["groups"]] == [0, 1]
    answers = client.get(f"{base}/groups/1/answers").json()["answers"]
    assert answers and all(a["group"] == 1 for a in answers)
    tokens = client.get(f"{base}/groups/1/answers/0/tokens").json()["tokens"]
    table = pq.read_table(step_file(run_root / "trl-analysed", "tokens", 2)).to_pandas()
    want = table[(table["group"] == 1) & (table["answer"] == 0)]
    assert [t["token_id"] for t in tokens] == want["token_id"].tolist()
    assert sum(t["selected"]["gmts"] for t in tokens) == answers[0]["selected_count"]["gmts"]
    assert client.get("/v1/analysed-runs/trl-analysed/steps/99/groups").status_code == 422


def test_rankings_and_filters_across_the_run(client: TestClient) -> None:
    base = "/v1/analysed-runs/synthetic"
    top = client.get(f"{base}/answers", params={"by": "length", "limit": 5}).json()
    lengths = [a["length"] for a in top["answers"]]
    assert lengths == sorted(lengths, reverse=True) and top["page"]["total"] == 3 * 30 * 8
    right = client.get(f"{base}/answers", params={"contains": "RIGHT", "limit": 1000}).json()
    assert right["page"]["total"] == len(right["answers"]) > 0
    assert all(a["reward"] == 1 for a in right["answers"])
    tokens = client.get(f"{base}/tokens", params={"by": "rank_gap", "step_from": 2}).json()
    scores = [t["score"] for t in tokens["tokens"]]
    assert scores == sorted(scores, reverse=True) and {t["step"] for t in tokens["tokens"]} <= {
        2,
        3,
    }
    zero = client.get(f"{base}/zero-signal-groups", params={"limit": 1000}).json()["groups"]
    flagged = client.get(f"{base}/answers", params={"zero_signal": True, "limit": 1000}).json()[
        "answers"
    ]
    assert {(g["step"], g["group"]) for g in zero} == {(a["step"], a["group"]) for a in flagged}


def test_bad_parameters_are_422_naming_the_choices(client: TestClient) -> None:
    r = client.get("/v1/analysed-runs/synthetic/answers", params={"by": "text; DROP"})
    assert r.status_code == 422 and "reward" in r.text
    r = client.get("/v1/analysed-runs/synthetic/tokens", params={"limit": 50, "offset": 990})
    assert r.status_code == 422 and "1000" in r.text
    assert client.get("/v1/analysed-runs/../steps").status_code == 404


def test_the_first_listing_starts_the_run_wide_lane_before_any_ranking(
    run_root: Path, tmp_path: Path
) -> None:
    """Listing the analysed runs starts the run-wide lane's reading process in the
    background, so the first ranking or search does not wait for one (the server's own start
    starts none)."""
    settings = make_settings(tmp_path, run_roots=[run_root], run_list_wait_s=300)
    with TestClient(create_app(settings)) as c:
        run_lane = c.app.state.services.analysed_runs._lanes["run"]  # type: ignore[attr-defined]
        assert run_lane.started == 0
        assert len(c.get("/v1/analysed-runs").json()["runs"]) == 2
        with run_lane.changed:  # started by the listing, with no run-wide request made
            assert run_lane.changed.wait_for(lambda: bool(run_lane._idle), timeout=PATIENCE_S)
        answers = c.get("/v1/analysed-runs/synthetic/answers", params={"by": "reward"})
        assert answers.status_code == 200 and run_lane.started == 1


def test_run_wide_queries_run_in_processes_that_yield_the_cpu_to_step_views(
    client: TestClient,
) -> None:
    """The two lanes: a step view never queues behind a run-wide query, and the run-wide
    lane's reading processes run at a niceness 10 above the server's, so on a busy machine
    the step views' processes get the CPU first."""
    import os

    base = "/v1/analysed-runs/synthetic"
    assert client.get(f"{base}/answers", params={"by": "length"}).status_code == 200
    assert client.get(f"{base}/steps/1/groups").status_code == 200
    lanes = client.app.state.services.analysed_runs._lanes  # type: ignore[attr-defined]
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    niceness = {
        lane: {os.getpriority(os.PRIO_PROCESS, w.proc.pid) for w in pool._idle}
        for lane, pool in lanes.items()
    }
    assert niceness == {"step": {mine}, "run": {min(19, mine + 10)}}
