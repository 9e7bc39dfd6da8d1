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


def test_a_dump_without_logged_entropy_gets_the_report_only(tmp_path: Path) -> None:
    """NeMo-RL logs log-probs and advantages but no entropy: no model-free selection, so no
    dataset is written (and settings.json says no step has its tokens written)."""
    args = ["analyze-run", str(RUNS / "nemo_rl"), "-o", str(tmp_path), "--model", "none"]
    result = CliRunner().invoke(cli, [*args, "--steps", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "report.json").read_text())["token_steps"] == []
    assert not (tmp_path / "dataset.json").exists() and not (tmp_path / "tokens").exists()


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


def test_the_dumps_numbers_are_written_as_a_dataset_the_runs_tab_opens(tmp_path: Path) -> None:
    """--model none also writes the analysed dataset from the logged numbers: it reads back
    (AnalysedRun: what the Runs tab's analysed runs open), the untrained tokens are never
    selected, g and gamma (the model's) are null and so are the figures made of them,
    dataset.json says which numbers are logged, and a step's entropy and gmts_entropy
    selections are the Runs tab's logged mode's (GET /v1/runs/.../steps/N?numbers=logged)."""
    import shutil

    import pandas as pd
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.reports.analysed_report import tokens_html
    from gmts_core.run_dataset import AnalysedRun
    from tests.app.api_helpers import make_settings

    root = tmp_path / "runs"
    shutil.copytree(RUNS / "prime_rl", root / "prime_rl")
    out = root / "analysed"
    args = ["analyze-run", str(RUNS / "prime_rl"), "-o", str(out), "--model", "none"]
    result = CliRunner().invoke(cli, [*args, "--steps", "1:2", "--tokens", "2"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "dataset.json").read_text())
    numbers = manifest["settings"]["numbers"]
    assert manifest["methods"] == ["entropy", "gmts_entropy"]
    assert numbers["entropy"].startswith("logged") and numbers["gamma"].startswith("absent")
    assert numbers["trained"].startswith("logged") and numbers["logged_inference_logprob"]
    run = AnalysedRun(out)
    try:
        assert run.step_numbers() == [2]  # --tokens: only the steps asked for
        (summary,) = run.steps()
        assert summary["coverage_entropy"] is None and summary["wasted_gmts_entropy"] is None
        first = run.answer_tokens(2, 0, 0)
        assert first and all(t["gamma"] is None and t["grad_norm"] is None for t in first)
    finally:
        run.close()
    tokens = pd.read_parquet(out / "tokens" / "step_00002.parquet")
    assert (~tokens["trained"]).sum() > 0 and tokens["gamma_rank"].isna().all()
    for m in ("entropy", "gmts_entropy"):
        chosen = tokens[f"selected_{m}"]
        assert chosen.any() and not (chosen & ~tokens["trained"]).any()
    assert (tokens["entropy"] == tokens["logged_entropy"]).all()

    settings = make_settings(tmp_path / "models", run_roots=[root], default_model="tiny-arith")
    with TestClient(create_app(settings)) as c:
        r = c.get("/v1/runs/prime_rl/steps/2", params={"numbers": "logged"})
        opened = c.get("/v1/analysed-runs/analysed/steps/2/groups/0/answers/0/tokens")
    assert r.status_code == 200, r.text
    assert opened.status_code == 200, opened.text
    rows = opened.json()["tokens"]
    assert [t["token_id"] for t in rows] == [t["token_id"] for t in first]
    assert all(t["text"] is None and t["gamma_rank"] is None for t in rows)
    page = tokens_html(rows, ["entropy", "gmts_entropy"])
    assert f"[id {rows[0]['token_id']}]" in page and "text not decoded" in page
    shown = [t for g in r.json()["logged"] for a in g["answers"] for t in a["tokens"]]
    assert len(shown) == len(tokens)
    for m in ("entropy", "gmts_entropy"):
        assert [t["selected"][m] for t in shown] == tokens[f"selected_{m}"].tolist()
