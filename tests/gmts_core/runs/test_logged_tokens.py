"""A dump's own per-token numbers first: without a model, a prime-rl step is reported from its
logged entropy, advantages, masks and log-probs (the entropy selections and the train/inference
mismatch); with the model, the recomputed numbers sit beside the logged ones. Checked against
the numbers computed here from the raw JSON lines, not through the reader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.model.loading import load_model
from gmts_core.runs import open_run
from gmts_core.runs.analysis import AnalysisConfig, analyze_step
from gmts_core.runs.dump_report import dump_step_report
from gmts_core.runs.logged_tokens import MISMATCH_THRESHOLD
from gmts_core.runs.report import (
    RunAnalysisPlan,
    analyze_run_shard,
    merge_report,
    prepare_output,
    settings_of,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
PRIME = DATA / "prime_rl"


def raw_trained(step: int) -> list[dict]:
    """Per trained answer token of the raw export: its logged numbers."""
    out = []
    path = PRIME / "token_exports" / f"step_{step}" / "rank_0.jsonl"
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        start = rec["loss_mask"].index(True)
        for t in range(start, len(rec["token_ids"])):
            if rec["loss_mask"][t]:
                out.append(
                    {
                        "entropy": rec["entropy"][t],
                        "delta": rec["trainer_logprobs"][t] - rec["inference_logprobs"][t],
                    }
                )
    return out


def test_a_prime_rl_step_is_reported_from_its_own_numbers_without_a_model() -> None:
    step = open_run(PRIME).step(1)
    config = AnalysisConfig(methods=("entropy",), ratio=0.2)
    report = dump_step_report(step, config)
    raw = raw_trained(1)
    assert report.mode == "logged" and report.num_tokens == len(raw)
    assert report.untrained_tokens > 0
    assert report.entropy_mean == pytest.approx(sum(r["entropy"] for r in raw) / len(raw))
    k = math.ceil(0.2 * len(raw))
    assert report.selected_count == {"entropy": k, "gmts_entropy": k}
    assert report.numbers["entropy"] == "logged" and report.numbers["loss_mask"] == "logged"
    assert "grad_norm" not in report.numbers  # nothing recomputed
    # the mismatch, from the raw lines: mean |delta| and the share above the threshold
    m = report.mismatch
    assert m is not None and m["trainer_side"] == "logged"
    deltas = [abs(r["delta"]) for r in raw]
    assert m["mean_abs_logprob_diff"] == pytest.approx(sum(deltas) / len(deltas))
    share = sum(d > MISMATCH_THRESHOLD for d in deltas) / len(deltas)
    assert m["share_above"] == pytest.approx(share)
    # the entropy selection's top tokens by the raw entropy: its share above the threshold
    top = sorted(raw, key=lambda r: -r["entropy"])[:k]
    above = sum(abs(r["delta"]) > MISMATCH_THRESHOLD for r in top) / k
    assert m["selected_share_above"]["entropy"] == pytest.approx(above)


def test_with_the_model_the_logged_numbers_sit_beside_the_recomputed_ones() -> None:
    lm = load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu", dtype="float32")
    step = open_run(PRIME).step(2)
    report, result = analyze_step(lm, step, AnalysisConfig(methods=("entropy", "gmts")))
    # the fixture's trainer numbers are this model's in float32: they agree to float32
    assert report.logged_vs_recomputed["entropy"] == pytest.approx(0.0, abs=1e-4)
    assert report.logged_vs_recomputed["trainer_logprob"] == pytest.approx(0.0, abs=1e-4)
    assert report.numbers["grad_norm"] == "recomputed" and report.numbers["entropy"] == "logged"
    assert report.mismatch is not None and set(report.mismatch["selected_share_above"]) == {
        "entropy",
        "gmts",
    }


def test_analyze_run_reports_a_dump_without_a_model(tmp_path: Path) -> None:
    run = open_run(PRIME)
    config = AnalysisConfig(methods=("entropy",))
    plan = RunAnalysisPlan(tuple(run.steps))
    prepare_output(tmp_path, settings_of(run, None, config, plan), resume=False)
    assert analyze_run_shard(run, None, config, plan, tmp_path) == 3
    report = merge_report(tmp_path, run.steps)
    assert report["mode"] == "logged" and report["model"] is None
    assert all(row["mismatch"]["share_above"] is not None for row in report["rows"])
