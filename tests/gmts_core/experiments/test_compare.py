"""The compare run: same start and batches for every method, aggregation over seeds."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from gmts_core.experiments.compare import CompareConfig, CompareResult, run_compare
from gmts_core.grpo.step import RLConfig
from gmts_core.modeling import LoadedModel, load_model
from tests.tiny_models import save_tiny_model

RL = RLConfig(group_size=2, prompts_per_step=2, max_new_tokens=4, learning_rate=1e-2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("cmp") / "llama")


@pytest.fixture(scope="module")
def result(folder: Path) -> CompareResult:
    lm: LoadedModel = load_model(folder, device="cpu")
    config = CompareConfig(
        methods=("entropy", "gmts", "random"),
        steps=3,
        seeds=2,
        eval_every=2,
        eval_problems=3,
        rl=RL,
    )
    seen: list[int] = []
    out = run_compare(lm, config, lambda done, total, _label: seen.append(done))
    assert seen == list(range(1, 3 * 2 * 3 + 1))  # progress after every step of every run
    return out


def test_every_method_starts_from_the_same_policy_and_batches(result: CompareResult) -> None:
    for seed in range(2):
        runs = [r for r in result.runs if r.seed == seed]
        # step 1 samples from the same starting policy with the same seed for every method
        assert len({r.reward[0] for r in runs}) == 1
        shared = [{m: r.wasted_share[0][m] for m in ("entropy", "gmts")} for r in runs]
        assert all(w == shared[0] for w in shared)
    assert all(r.accuracy[0] == result.start_accuracy for r in result.runs)


def test_aggregates_are_mean_and_std_over_seeds(result: CompareResult) -> None:
    assert result.config.eval_steps() == [0, 2, 3]
    body = result.to_dict()
    for m in result.config.methods:
        runs = result.runs_of(m)
        assert len(runs) == 2
        reward = body["curves"][m]["reward"]
        assert len(reward) == 3
        assert reward[1]["mean"] == pytest.approx(statistics.fmean(r.reward[1] for r in runs))
        assert reward[1]["std"] == pytest.approx(statistics.stdev(r.reward[1] for r in runs))
        acc = body["curves"][m]["accuracy"]
        assert [a["step"] for a in acc] == [0, 2, 3]
        assert set(body["curves"][m]["wasted_share"]) >= {"entropy", "gmts"}
    assert [row["method"] for row in body["table"]] == ["entropy", "gmts", "random"]
    json.dumps(body)  # JSON-serializable as is


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="valid"):
        CompareConfig(methods=("entropy", "nope")).validate()
    with pytest.raises(ValueError):
        dataclasses.replace(CompareConfig(), steps=0).validate()
