"""The compare run: same start and batches for every method, aggregation over seeds."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from gmts_core.config import RLConfig
from gmts_core.experiments.compare import (
    CompareConfig,
    CompareResult,
    RunCurve,
    run_compare,
)
from gmts_core.model.loading import LoadedModel, load_model
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


def test_final_table_is_a_bootstrap_over_kept_per_problem_scores(result: CompareResult) -> None:
    n = result.config.eval_problems
    assert len(result.start_per_problem) == n
    assert statistics.fmean(result.start_per_problem) == pytest.approx(result.start_accuracy)
    for run in result.runs:  # each run keeps its final score on every held-out problem
        assert len(run.final_per_problem) == n
        assert statistics.fmean(run.final_per_problem) == pytest.approx(run.accuracy[3])
    for row in result.table():
        acc = row["final_accuracy"]
        assert 0.0 <= acc["ci_low"] <= acc["mean"] <= acc["ci_high"] <= 1.0
        assert row["interval_over"] == "seeds and problems"
    assert result.table() == result.table()  # the bootstrap is seeded: the same table again


def test_wasted_share_column_is_the_charts_line(result: CompareResult) -> None:
    for row in result.table():
        line = [p["mean"] for p in result.wasted_curve(row["method"])]
        w = row["wasted_share"]
        assert w["mean"] == pytest.approx(statistics.fmean(line))
        assert w["peak"] == max(line) == line[w["peak_step"] - 1]


def _hand_result(
    finals: dict[str, list[float]], per_problem: dict[str, list[list[float]]] | None = None
) -> CompareResult:
    config = CompareConfig(methods=tuple(finals), steps=1, seeds=len(next(iter(finals.values()))))
    runs = [
        RunCurve(
            m,
            s,
            reward=[0.5],
            wasted_share=[{m: 0.0}],
            accuracy={0: 0.5, 1: acc},
            final_per_problem=per_problem[m][s] if per_problem else [],
        )
        for m, accs in finals.items()
        for s, acc in enumerate(accs)
    ]
    start = [0.5] * len(per_problem[next(iter(finals))][0]) if per_problem else []
    return CompareResult(config, "hand", runs, 0.5, 0.0, start)


def test_a_file_without_per_problem_scores_gets_seed_intervals_and_no_verdict() -> None:
    # gmts beats entropy by 0.05 on every seed: the seeds-only interval is narrow, but seeds
    # alone do not count the problems' noise, so no verdict is given
    result = _hand_result(
        {
            "gmts": [0.55, 0.65, 0.75, 0.60, 0.70],
            "entropy": [0.50, 0.60, 0.70, 0.55, 0.65],
        }
    )
    rows = {r["method"]: r for r in result.table()}
    assert rows["entropy"]["paired_difference"] is None and rows["entropy"]["within_noise"] is None
    gm = rows["gmts"]
    assert gm["reference"] == "entropy" and gm["interval_over"] == "seeds"
    assert gm["paired_difference"]["mean"] == pytest.approx(0.05)
    assert gm["paired_difference"]["ci_low"] == pytest.approx(0.05)  # the same on every seed
    assert gm["within_noise"] is None and "no verdict" in gm["conclusion"]
    json.dumps(result.to_dict(), allow_nan=False)


def test_paired_differences_against_entropy() -> None:
    # entropy's seeds spread widely (0.2 .. 0.8); gmts gets right 2 of the 10 problems entropy
    # gets wrong on every seed: the paired interval excludes 0 although the unpaired overlap.
    # random differs from entropy on a problem or two either way: within noise
    entropy = [[1.0] * k + [0.0] * (10 - k) for k in (2, 5, 8)]
    gmts = [row[:k] + [1.0, 1.0] + row[k + 2 :] for row, k in zip(entropy, (2, 5, 8), strict=True)]
    random = [[0.0] + entropy[0][1:], entropy[1][:5] + [1.0] + entropy[1][6:], entropy[2]]
    per_problem = {"gmts": gmts, "entropy": entropy, "random": random}
    finals = {m: [statistics.fmean(p) for p in v] for m, v in per_problem.items()}
    rows = {r["method"]: r for r in _hand_result(finals, per_problem).table()}
    gm = rows["gmts"]
    assert gm["paired_difference"]["mean"] == pytest.approx(0.2)
    assert gm["within_noise"] is False and "separable with 3 seeds" in gm["conclusion"]
    ent_iv, gm_iv = rows["entropy"]["final_accuracy"], gm["final_accuracy"]
    assert ent_iv["ci_high"] > gm_iv["ci_low"]  # unpaired intervals overlap nonetheless
    assert rows["random"]["within_noise"] is True
    assert "not separable with 3 seeds" in rows["random"]["conclusion"]


def test_two_seeds_keep_every_accuracy_interval_in_unit_range() -> None:
    # two seeds far apart, near the edges: a t-interval over seeds leaves [0, 1] here
    per_problem = {
        "entropy": [[1.0] * 9 + [0.0], [0.0] * 9 + [1.0]],
        "gmts": [[1.0] * 10, [0.0] * 8 + [1.0, 1.0]],
    }
    finals = {m: [statistics.fmean(p) for p in v] for m, v in per_problem.items()}
    for row in _hand_result(finals, per_problem).table():
        for key in ("final_accuracy",):
            assert 0.0 <= row[key]["ci_low"] <= row[key]["ci_high"] <= 1.0
        assert -1.0 <= row["gain"]["ci_low"] <= row["gain"]["ci_high"] <= 1.0
