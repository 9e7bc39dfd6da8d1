"""The replication study (benchmarks/replicate.py) at its tiniest (``--quick``): both regimes,
every method's row with the paired difference to entropy, curves with intervals, the SVG; and
the split into one compare per (regime, method) over worker processes changes no number."""

from __future__ import annotations

import importlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from tests.benchmarks.runner import REPO, run_benchmark

pytestmark = pytest.mark.skipif(
    not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained yet"
)

METHODS = ["all", "entropy", "gmts", "gmts_paper", "random"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    svg = tmp_path_factory.mktemp("replicate") / "curves.svg"
    return run_benchmark("replicate", "--quick", "--svg", str(svg)), svg


def test_quick_study_reports_both_regimes_with_paired_intervals(
    quick: tuple[dict[str, Any], Path],
) -> None:
    r, svg = quick
    assert r["methods"] == METHODS and list(r["regimes"]) == ["default", "hard-mix"]
    assert r["settings"]["seeds"] == 2 and r["settings"]["steps"] == 2
    assert r["wall_seconds"] > 0 and r["load_before"] and r["command"]
    for regime in r["regimes"].values():
        assert [row["method"] for row in regime["table"]] == METHODS
        for row in regime["table"]:
            acc = row["final_accuracy"]
            assert 0.0 <= acc["ci_low"] <= acc["mean"] <= acc["ci_high"] <= 1.0
            assert row["reference"] == "entropy"
            assert (row["paired_difference"] is None) == (row["method"] == "entropy")
        assert len(regime["conclusions"]) == len(METHODS) - 1
        for m in METHODS:
            curve = regime["curves"][m]
            assert [p["step"] for p in curve["accuracy"]] == [0, 1, 2]
            assert all(p["ci_low"] <= p["mean"] <= p["ci_high"] for p in curve["accuracy"])
            assert len(curve["reward"]) == len(curve["wasted_share"]) == 2
        entropy_diff = regime["curves"]["entropy"]["vs_reference"]
        assert all(p["mean"] == p["ci_low"] == p["ci_high"] == 0.0 for p in entropy_diff)
    zero = {k: v["zero_signal_share"] for k, v in r["regimes"].items()}
    assert zero["hard-mix"] >= 0.5 > zero["default"]  # half of every hard-mix batch
    root = ET.parse(svg).getroot()  # well-formed
    assert root.tag.endswith("svg") and "hard-mix" in svg.read_text()


def test_two_workers_give_the_same_runs_as_one(quick: tuple[dict[str, Any], Path]) -> None:
    r, _ = quick
    two = run_benchmark(
        "replicate", "--quick", "--jobs", "2", "--regimes", "hard-mix", "--methods", "entropy,gmts"
    )
    for m in ("entropy", "gmts"):
        one_curve = r["regimes"]["hard-mix"]["curves"][m]
        two_curve = two["regimes"]["hard-mix"]["curves"][m]
        assert two_curve["accuracy"] == one_curve["accuracy"]
        assert two_curve["reward"] == one_curve["reward"]


def test_replot_draws_reports_of_other_regimes_side_by_side(
    quick: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    r, _ = quick
    paths = []
    for regime in ("default", "hard-mix"):  # one report per regime, as two runs write them
        path = tmp_path / f"{regime}.json"
        path.write_text(json.dumps({**r, "regimes": {regime: r["regimes"][regime]}}))
        paths.append(str(path))
    svg = tmp_path / "both.svg"
    merged = run_benchmark("replicate", "--replot", *paths, "--svg", str(svg))
    assert merged["regimes"] == r["regimes"]  # nothing trained, nothing changed
    assert merged["wall_seconds"] == round(2 * r["wall_seconds"], 1) and len(merged["runs"]) == 2
    assert ET.parse(svg).getroot().tag.endswith("svg")


def test_seed_offset_and_evaluation_draws_are_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a re-run with other seeds (issue 46): training seeds from the offset, other evaluation
    # draws, several answers per held-out problem
    out = tmp_path / "cmp"
    extra = ("--regimes", "hard-mix", "--methods", "entropy,gmts", "--seed-offset", "7")
    noise = ("--eval-seed", "123", "--eval-samples", "2", "--compare-out", str(out))
    r = run_benchmark("replicate", "--quick", *extra, *noise)
    s = r["settings"]
    assert (s["seed_offset"], s["eval_seed"]) == (7, 123) and "x 2 answer(s)" in s["eval"]
    body = json.loads((out / "hard-mix" / "compare.json").read_text())
    assert sorted({run["seed"] for run in body["runs"]}) == [7, 8]
    assert (body["config"]["eval_seed"], body["config"]["eval_samples"]) == (123, 2)
    assert r["compare_out"] == str(out.resolve())
    # the slope of the training reward over the first and last quarter, per method
    slope = r["regimes"]["hard-mix"]["reward_slope_per_10_steps"]["gmts"]["last_quarter"]
    assert slope["ci_low"] <= slope["mean"] <= slope["ci_high"] and slope["steps"] == [1, 2]

    # a second block of seeds (9, 10) merges with the first into one report of seeds 7-10,
    # whose runs are the blocks' own
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(r))
    out2 = tmp_path / "cmp2"
    more = ("--seed-offset", "9", "--lr", str(r["settings"]["recipe"]["learning_rate"]))
    r2 = run_benchmark(
        "replicate", "--quick", *extra[:4], *noise[:4], *more, "--compare-out", str(out2)
    )
    second.write_text(json.dumps(r2))
    merged = run_benchmark("replicate", "--merge-seeds", str(second), str(first))
    assert merged["settings"]["seeds"] == 4 and len(merged["runs"]) == 2
    regime = merged["regimes"]["hard-mix"]
    assert "with 4 seeds" in regime["conclusions"][0]
    gmts = [p["mean"] for p in regime["curves"]["gmts"]["reward"]]
    parts = [b["regimes"]["hard-mix"]["curves"]["gmts"]["reward"] for b in (r, r2)]
    assert gmts == pytest.approx([(a["mean"] + b["mean"]) / 2 for a, b in zip(*parts, strict=True)])
    # a block of another recipe refuses to merge (in process: the same function the CLI calls)
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    replicate = importlib.import_module("replicate")
    other = json.loads((out2 / "hard-mix" / "compare.json").read_text())
    other["config"]["rl"]["learning_rate"] *= 2
    (tmp_path / "other" / "hard-mix").mkdir(parents=True)
    (tmp_path / "other" / "hard-mix" / "compare.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="differ in more than their seeds"):
        replicate.merge_seeds([r, {**r2, "compare_out": str(tmp_path / "other")}])


def test_plateau_reports_every_quarter_slope_mean_and_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the plateau evidence of docs/replication.md, in process: a reward that rises by 0.1 a step
    # for 4 steps and then stays flat, on two seeds 0.02 apart
    from gmts_core.experiments.compare import CompareConfig, CompareResult, RunCurve

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    replicate = importlib.import_module("replicate")
    rise = [0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5]
    runs = [RunCurve("gmts", s, reward=[r + 0.02 * s for r in rise]) for s in (0, 1)]
    config = CompareConfig(methods=("gmts",), steps=8, seeds=2)
    quarters = replicate.plateau(CompareResult(config, "m", runs, 0.5, 1.0))["gmts"]["quarters"]
    assert [q["steps"] for q in quarters] == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert [q["slope"]["mean"] for q in quarters] == pytest.approx([1.0, 1.0, 0.0, 0.0], abs=1e-9)
    assert [q["reward"]["mean"] for q in quarters] == pytest.approx([0.16, 0.36, 0.51, 0.51])
    assert quarters[0]["change"] is None
    changes = [q["change"] for q in quarters[1:]]
    assert [c["mean"] for c in changes] == pytest.approx([0.2, 0.15, 0.0], abs=1e-9)
    assert all(c["ci_low"] == pytest.approx(c["ci_high"], abs=1e-9) for c in changes)


def _points(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "\u2212")


def _page_row(row: dict[str, Any]) -> str:
    """A final-table row of docs/replication.md as the page writes it from its JSON."""
    acc, gain, diff = row["final_accuracy"], row["gain"], row["paired_difference"]
    wasted, reward = row["wasted_share"], row["train_reward_last5"]
    cells = [
        row["method"],
        f"{acc['mean']:.3f} [{acc['ci_low']:.3f}, {acc['ci_high']:.3f}]",
        f"{_points(gain['mean'])} [{_points(gain['ci_low'])}, {_points(gain['ci_high'])}]",
        "(reference)"
        if diff is None
        else f"{_points(diff['mean'])} [{_points(diff['ci_low'])}, {_points(diff['ci_high'])}]",
        f"{wasted['mean']:.2f}, {wasted['peak']:.2f}",
        f"{reward['mean']:.3f} ± {reward['std']:.3f}",
    ]
    return "| " + " | ".join(cells) + " |"


@pytest.mark.parametrize(
    "report",
    [
        "replication-hardmix-100.json",
        "replication-hardmix-200.json",
        "replication-hardmix-280.json",
        "replication-hardmix-decay.json",
    ],
)
def test_replication_page_states_its_json(report: str) -> None:
    # the page's final table, its verdict sentence and its wall time are the JSON's own
    page = " ".join((REPO / "docs" / "replication.md").read_text("utf-8").replace("**", "").split())
    r = json.loads((REPO / "docs" / report).read_text("utf-8"))
    regime = r["regimes"]["hard-mix"]
    for row in regime["table"]:
        assert _page_row(row) in page
    for sentence in regime["conclusions"]:
        assert sentence.split(" Power:")[0] in page
    assert f"{r['wall_seconds']:,.0f} s" in page
