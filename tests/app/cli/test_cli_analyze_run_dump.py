"""`gmts analyze-run RUN --model none`: a dump that logs per-token numbers (the prime-rl
export) is reported from them alone: no model loaded, the entropy selections over the trained
tokens, the train/inference mismatch per step, report.json and report.html written."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import app.cli.analyze_run  # noqa: F401  (registers the command)
from app.cli._app import cli

RUNS = Path(__file__).resolve().parents[2] / "data" / "runs"


def test_a_dump_is_reported_from_its_own_numbers(tmp_path: Path) -> None:
    args = ["analyze-run", str(RUNS / "prime_rl"), "-o", str(tmp_path), "--model", "none"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mode"] == "logged" and report["model"] is None
    assert report["methods"] == ["entropy", "gmts_entropy"]
    for row in report["rows"]:
        assert row["untrained_tokens"] > 0 and row["numbers"]["entropy"] == "logged"
        assert row["mismatch"]["trainer_side"] == "logged"
    assert (tmp_path / "report.html").is_file()


def test_a_dump_without_per_token_numbers_still_needs_a_model(tmp_path: Path) -> None:
    args = ["analyze-run", str(RUNS / "verl"), "-o", str(tmp_path), "--model", "none"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and "needs --model" in result.output


def test_the_analysed_dataset_carries_the_dumps_numbers_and_the_mismatch(tmp_path: Path) -> None:
    """With the model: each token's loss mask (``trained``), the dump's logged numbers and its
    train/inference difference in the tokens table; the step's mismatch share (overall and of
    each method's selection) in the steps table equal to report.json's and to the tokens'
    own columns; the dataset still reads through its queries."""
    import numpy as np
    import pandas as pd

    from gmts_core.run_dataset import AnalysedRun

    out = tmp_path / "out"
    args = ["analyze-run", str(RUNS / "prime_rl"), "-o", str(out), "--model", "tiny-arith"]
    result = CliRunner().invoke(cli, [*args, "--steps", "1"])
    assert result.exit_code == 0, result.output
    row = json.loads((out / "report.json").read_text())["rows"][0]
    tokens = pd.read_parquet(out / "tokens" / "step_00001.parquet")
    steps = pd.read_parquet(out / "steps" / "step_00001.parquet").iloc[0]
    assert int((~tokens["trained"]).sum()) == row["untrained_tokens"] > 0
    diff = tokens["logged_trainer_logprob"] - tokens["logged_inference_logprob"]
    np.testing.assert_allclose(tokens["logprob_diff"], diff, atol=1e-6)
    mismatch = row["mismatch"]
    assert steps["mismatch_share_above"] == np.float32(mismatch["share_above"])
    high = tokens["trained"] & (tokens["logprob_diff"].abs() > steps["mismatch_threshold"])
    for method in ("entropy", "gmts"):
        chosen = tokens[f"selected_{method}"]
        share = (chosen & high).sum() / chosen.sum()
        assert steps[f"mismatch_selected_share_{method}"] == np.float32(share)
        assert share == mismatch["selected_share_above"][method]
        assert not (chosen & ~tokens["trained"]).any()
    run = AnalysedRun(out)
    try:
        assert [s["step"] for s in run.steps()] == [1]
        assert run.answer_tokens(1, 0, 0)
    finally:
        run.close()
