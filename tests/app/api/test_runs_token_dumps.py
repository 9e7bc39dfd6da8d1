"""GET /v1/runs/...: the per-token dumps (prime-rl, NeMo-RL, open-instruct) open through the API
(read in the reading processes), and a token their trainer's loss did not count comes back with
its text, ``trained`` false, selected by no method and counted in no figure; the step's report
carries the logged-vs-recomputed numbers and the train/inference mismatch; a TRL step says how
its reward columns were found."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.app.api_helpers import make_settings

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
DUMPS = ("prime_rl", "nemo_rl", "open_instruct")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("runs")
    for name in (*DUMPS, "slime", "miles"):
        shutil.copytree(DATA / name, root / name)
    folder = root / "trl-extra" / "completions"
    folder.mkdir(parents=True)
    pd.DataFrame(
        {
            "step": [1] * 4,
            "prompt": ["Q: 1+1=?"] * 4,
            "completion": [" 2", " 3", " 2", " 4"],
            "accuracy_reward": [1.0, 0.0, 1.0, 0.0],
            "num_reasoning_steps": [3, 7, 2, 9],
            "advantage": [0.866, -0.866, 0.866, -0.866],
        }
    ).to_parquet(folder / "completions_00001.parquet")
    settings = make_settings(
        tmp_path_factory.mktemp("models"),
        run_roots=[root],
        default_model="tiny-arith",
        max_total_tokens=8192,
        run_max_step_answers=12,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_the_dumps_open_with_their_formats(client: TestClient) -> None:
    for name in DUMPS:
        r = client.get(f"/v1/runs/{name}")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["run"]["format"] == name and body["steps"] == [1, 2, 3]


@pytest.mark.parametrize("name", ["prime_rl", "nemo_rl"])
def test_untrained_tokens_come_back_greyed_and_never_selected(
    client: TestClient, name: str
) -> None:
    r = client.get(
        f"/v1/runs/{name}/steps/1",
        params={"model": "tiny-arith", "methods": "entropy,gmts,gmts_entropy"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    tokens = [t for g in body["analysis"]["groups"] for a in g["answers"] for t in a["tokens"]]
    untrained = [t for t in tokens if not t["trained"]]
    assert untrained and all(t["text"] for t in untrained)
    assert not any(any(t["selected"].values()) for t in untrained)
    assert all(set(t["ranks"].values()) == {0} for t in untrained)
    summary = body["analysis"]["summary"]
    assert summary["num_tokens"] == len(tokens) - len(untrained)
    report = body["report"]
    assert report["untrained_tokens"] == len(untrained)
    assert report["mismatch"]["share_above"] is not None
    assert report["numbers"]["inference_logprob"] == "logged"


def test_open_instruct_rollouts_open(client: TestClient) -> None:
    r = client.get("/v1/runs/open_instruct/steps/2", params={"model": "tiny-arith"})
    assert r.status_code == 200, r.text
    answers = [a for g in r.json()["analysis"]["groups"] for a in g["answers"]]
    assert len(answers) == 12 and all(t["trained"] for a in answers for t in a["tokens"])


def test_a_trl_step_says_how_its_rewards_were_read(client: TestClient) -> None:
    r = client.get("/v1/runs/trl-extra/steps/1", params={"model": "tiny-arith"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert any("recovered" in n for n in body["notes"])
    analysis = body["analysis"]  # one group: the single form (prompt, answers)
    rewards = [a["reward"] for a in analysis["answers"]]
    assert rewards == [1.0, 0.0, 1.0, 0.0]  # the logged count is not added


def test_a_dump_opens_from_its_own_numbers_without_the_model(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """numbers=logged: a prime-rl step is shown from the numbers its export logged, the model
    never loaded (its tokenizer turns ids into text): gmts_entropy selects the trained tokens of
    largest |A|·H (token-mean: w equal), no tool token is selected, every token carries its
    logged numbers and the logged train/inference difference."""
    root = tmp_path_factory.mktemp("dump-runs")
    shutil.copytree(DATA / "prime_rl", root / "prime_rl")
    settings = make_settings(
        tmp_path_factory.mktemp("m"), run_roots=[root], default_model="tiny-arith"
    )
    with TestClient(create_app(settings)) as c:
        r = c.get("/v1/runs/prime_rl/steps/2", params={"numbers": "logged"})
        assert r.status_code == 200, r.text
        assert c.app.state.services.models.cache.loaded_names() == []  # type: ignore[attr-defined]
        bad = c.get("/v1/runs/prime_rl/steps/2", params={"numbers": "guessed"})
        assert bad.status_code == 422
    body = r.json()
    assert body["mode"] == "dump" and body["report"]["mode"] == "logged"
    tokens = [(a, t) for g in body["logged"] for a in g["answers"] for t in a["tokens"]]
    trained = [(a["advantage"], t) for a, t in tokens if t["trained"]]
    assert len(trained) < len(tokens)
    assert not any(any(t["selected"].values()) for _, t in tokens if not t["trained"])
    assert all(t["text"] and "logprob_diff" in t["logged"] for _, t in trained)
    for _, t in trained:
        logged = t["logged"]
        diff = logged["trainer_logprob"] - logged["inference_logprob"]
        assert logged["logprob_diff"] == pytest.approx(diff)
    score = [abs(adv) * t["logged"]["entropy"] for adv, t in trained]
    chosen = [s for s, (_, t) in zip(score, trained, strict=True) if t["selected"]["gmts_entropy"]]
    others = [
        s for s, (_, t) in zip(score, trained, strict=True) if not t["selected"]["gmts_entropy"]
    ]
    assert chosen and min(chosen) >= max(others)
    assert len(chosen) == body["report"]["selected_count"]["gmts_entropy"]


@pytest.mark.parametrize("name", ["nemo_rl", "open_instruct", "slime", "miles"])
def test_every_per_token_dump_opens_from_its_own_numbers(client: TestClient, name: str) -> None:
    """numbers=logged on every other per-token dump: the step opens from what its trainer
    logged (each token's logged numbers, its loss mask; untrained tokens never selected), and
    with the model each analysed token carries the same logged numbers beside GMTS's."""
    first = client.get(f"/v1/runs/{name}").json()["steps"][0]
    dump = client.get(f"/v1/runs/{name}/steps/{first}", params={"numbers": "logged"})
    assert dump.status_code == 200, dump.text
    model = client.get(f"/v1/runs/{name}/steps/{first}", params={"model": "tiny-arith"})
    assert model.status_code == 200, model.text
    body = dump.json()
    assert body["mode"] == "dump"
    tokens = [t for g in body["logged"] for a in g["answers"] for t in a["tokens"]]
    assert tokens and all(t["text"] and t["logged"] for t in tokens)
    assert not any(any(t["selected"].values()) for t in tokens if not t["trained"])
    assert body["report"]["untrained_tokens"] == sum(not t["trained"] for t in tokens)
    analysis = model.json()["analysis"]
    answers = (
        [a for g in analysis["groups"] for a in g["answers"]]
        if analysis["groups"]
        else (analysis["answers"])
    )
    analysed = [t for a in answers for t in a["tokens"]]
    assert [t["trained"] for t in analysed] == [t["trained"] for t in tokens]
    for mine, logged in zip(analysed, tokens, strict=True):
        shared = set(logged["logged"]) - {"logprob_diff", "importance_ratio"}
        assert {k: mine["logged"][k] for k in shared} == {k: logged["logged"][k] for k in shared}
