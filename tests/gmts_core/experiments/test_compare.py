"""The compare run: same start and batches for every method, aggregation over seeds."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from gmts_core.experiments.compare import (
    CompareConfig,
    CompareResult,
    RunCurve,
    mean_interval,
    run_compare,
    within_noise,
)
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


def test_mean_interval_is_student_t_by_hand() -> None:
    from scipy.stats import t

    values = [0.50, 0.55, 0.60, 0.52, 0.58]
    iv = mean_interval(values)
    half = t.ppf(0.975, 4) * statistics.stdev(values) / len(values) ** 0.5
    assert iv["mean"] == pytest.approx(0.55)
    assert iv["ci_low"] == pytest.approx(0.55 - half)
    assert iv["ci_high"] == pytest.approx(0.55 + half)
    one = mean_interval([0.3])
    assert one["ci_low"] is None and one["ci_high"] is None
    assert within_noise(one)
    assert within_noise({"ci_low": -0.01, "ci_high": 0.02})
    assert not within_noise({"ci_low": 0.01, "ci_high": 0.02})


def _hand_result(finals: dict[str, list[float]]) -> CompareResult:
    config = CompareConfig(methods=tuple(finals), steps=1, seeds=len(next(iter(finals.values()))))
    runs = [
        RunCurve(m, s, reward=[0.5], wasted_share=[{m: 0.0}], accuracy={0: 0.5, 1: acc})
        for m, accs in finals.items()
        for s, acc in enumerate(accs)
    ]
    return CompareResult(config, "hand", runs, start_accuracy=0.5, seconds=0.0)


def test_paired_differences_against_entropy() -> None:
    # gmts beats entropy by 0.05 on every seed although both spread widely across seeds: the
    # paired interval excludes 0; random's differences straddle 0
    result = _hand_result(
        {
            "gmts": [0.55, 0.65, 0.75, 0.60, 0.70],
            "entropy": [0.50, 0.60, 0.70, 0.55, 0.65],
            "random": [0.52, 0.58, 0.71, 0.56, 0.64],
        }
    )
    rows = {r["method"]: r for r in result.table()}
    assert rows["entropy"]["paired_difference"] is None and rows["entropy"]["within_noise"] is None
    gm = rows["gmts"]
    assert gm["reference"] == "entropy"
    assert gm["paired_difference"]["mean"] == pytest.approx(0.05)
    assert gm["within_noise"] is False
    ent_iv, gm_iv = rows["entropy"]["final_accuracy"], gm["final_accuracy"]
    assert ent_iv["ci_high"] > gm_iv["ci_low"]  # unpaired intervals overlap nonetheless
    assert rows["random"]["within_noise"] is True
    json.dumps(result.to_dict(), allow_nan=False)
