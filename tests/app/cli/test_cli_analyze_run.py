"""`gmts analyze-run`: a real TRL dump analysed step by step into JSON, parquet and HTML;
--steps, --tokens, --resume, --reward; the model through the CLI's one registry; and 2
accelerate processes give the 1-process report."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import app.cli.analyze_run  # noqa: F401  (registers the command)
from app.cli._app import cli
from app.cli.common import services
from app.services.model_registry import LoadedModel, ModelRef, ModelRegistry
from app.services.run_analysis import RunAnalysisRequest, run_analysis
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.errors import InvalidInputError
from gmts_core.model.loading import load_model
from gmts_core.run_dataset import AnalysedRun, steps_index
from gmts_core.run_dataset.schema import schema
from tests.multiprocess import free_port, run

REPO = Path(__file__).resolve().parents[3]
RUNS = REPO / "tests" / "data" / "runs"
METHODS = "entropy,gmts,random,all"


@pytest.fixture
def models() -> ModelRegistry:
    """The registry every CLI command (analyze-run too) loads its models through."""
    return services().models


def invoke(*args: str) -> None:
    result = CliRunner().invoke(cli, ["analyze-run", *args])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def trl_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trl-report")
    invoke(str(RUNS / "trl"), "-o", str(out), "--methods", METHODS, "--tokens", "2")
    return out


def test_report_rows_match_the_dump_and_a_direct_analysis(trl_report: Path) -> None:
    report = json.loads((trl_report / "report.json").read_text())
    assert report["format"] == "trl" and report["steps"] == [1, 2, 3]
    assert [r["step"] for r in report["rows"]] == [1, 2, 3]
    lm = load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu")
    config = AnalysisConfig(methods=tuple(METHODS.split(",")))
    for row in report["rows"]:
        df = pd.read_parquet(
            RUNS / "trl" / "completions" / f"completions_{row['step']:05d}.parquet"
        )
        assert row["num_answers"] == len(df)
        assert row["reward_mean"] == pytest.approx(df["numeric_reward"].mean())
        assert row["reward_std"] == pytest.approx(df["numeric_reward"].std(ddof=0))
        groups = [
            GroupInput(p, list(g["completion"]), rewards=list(g["numeric_reward"]))
            for p, g in df.groupby("prompt", sort=False)
        ]
        direct = analyze(lm, groups, config).summary
        assert row["gradient_coverage"] == pytest.approx(direct["gradient_coverage"])
        assert row["wasted_share"] == pytest.approx(direct["wasted_share"])
        assert row["num_tokens"] == direct["num_tokens"]
        zero = df.groupby("prompt")["numeric_reward"].nunique().eq(1).mean()
        assert row["zero_signal_share"] == pytest.approx(zero)


def test_tokens_only_for_the_steps_asked_and_flags_match_the_counts(trl_report: Path) -> None:
    assert [p.name for p in (trl_report / "tokens").iterdir()] == ["step_00002.parquet"]
    tokens = pq.read_table(trl_report / "tokens" / "step_00002.parquet").to_pandas()
    row = json.loads((trl_report / "report.json").read_text())["rows"][1]
    assert len(tokens) == row["num_tokens"] and set(tokens["step"]) == {2}
    for m in METHODS.split(","):
        assert int(tokens[f"selected_{m}"].sum()) == row["selected_count"][m]
    assert (tokens["gamma"] >= 0).all() and tokens["token_id"].dtype.kind == "i"


def test_html_is_self_contained_with_charts(trl_report: Path) -> None:
    html = (trl_report / "report.html").read_text()
    assert "Gradient coverage per method" in html and "Wasted share" in html
    assert "<script src=" not in html  # plotly.js inlined: opens offline
    # the five of GMTS's numbers and the one of what TRL logged (its trainer_state.json)
    assert html.count("Plotly.newPlot") == 6 and "What TRL itself measured" in html


def test_steps_spec_and_resume_skip_finished_steps(tmp_path: Path, models: ModelRegistry) -> None:
    req = RunAnalysisRequest(RUNS / "run.jsonl", tmp_path, "tiny-arith", steps="1:3:2")
    seen: list[int] = []
    run_analysis(req, models, on_step=lambda r: seen.append(r.step if r else -1))
    assert seen == [1, 3]
    part = tmp_path / "parts" / "steps-0.jsonl"
    first, second = part.read_text().splitlines()
    part.write_text(first + "\n" + second[:40])  # killed while writing step 3's line
    seen.clear()
    outcome = run_analysis(
        RunAnalysisRequest(RUNS / "run.jsonl", tmp_path, "tiny-arith", steps="1:3:2", resume=True),
        models,
        on_step=lambda r: seen.append(r.step if r else -1),
    )
    assert seen == [-1, 3] and outcome.analysed == 1
    assert [r["step"] for r in outcome.report["rows"]] == [1, 3]
    with pytest.raises(InvalidInputError, match="different settings \\(ratio"):
        run_analysis(
            RunAnalysisRequest(
                RUNS / "run.jsonl",
                tmp_path,
                "tiny-arith",
                steps="1:3:2",
                analysis=AnalysisConfig(ratio=0.5),
                resume=True,
            ),
            models,
        )


def test_resume_completes_the_dataset_without_rewriting_finished_steps(
    tmp_path: Path, models: ModelRegistry
) -> None:
    req = RunAnalysisRequest(RUNS / "run.jsonl", tmp_path, "tiny-arith", steps="1:3:2")
    run_analysis(req, models)
    first = (tmp_path / "tokens" / "step_00001.parquet").stat().st_mtime_ns
    part = tmp_path / "parts" / "steps-0.jsonl"
    part.write_text(part.read_text().splitlines()[0] + "\n")  # killed before step 3 finished
    for table in ("tokens", "answers", "steps", "top"):
        (tmp_path / table / "step_00003.parquet").unlink()
    resumed = run_analysis(
        RunAnalysisRequest(RUNS / "run.jsonl", tmp_path, "tiny-arith", steps="1:3:2", resume=True),
        models,
    )
    assert resumed.analysed == 1
    assert (tmp_path / "tokens" / "step_00001.parquet").stat().st_mtime_ns == first
    dataset = AnalysedRun(tmp_path)
    assert dataset.step_numbers() == [1, 3]
    # the steps index: every step once from a line that matches its summary file now (step
    # 3's line from before the kill is stale: its file was written again), equal to the file
    entries = dataset.folder.steps("steps")
    names = schema("steps", dataset.methods).names
    indexed = steps_index.read(dataset.folder, entries, names)
    assert (
        sorted(indexed) == [e.name for e in entries] == ["step_00001.parquet", "step_00003.parquet"]
    )
    assert [indexed[e.name] for e in entries] == [dataset.summary(e) for e in entries]
    lines = [json.loads(x) for x in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert sorted(x["file"] for x in lines) == ["step_00001.parquet", *["step_00003.parquet"] * 2]
    for row, summary in zip(resumed.report["rows"], dataset.steps(), strict=True):
        assert summary["num_tokens"] == row["num_tokens"]
        for m in dataset.methods:
            assert summary[f"coverage_{m}"] == pytest.approx(row["gradient_coverage"][m], rel=1e-6)


def test_rewards_are_recomputed_only_with_a_reward_rule(
    tmp_path: Path, models: ModelRegistry
) -> None:
    run = tmp_path / "refs.jsonl"
    run.write_text(
        json.dumps(
            {"step": 1, "prompt": "Q: 2+2=?\nA:", "completions": [" 4", " 5"], "reference": 4}
        )
        + "\n"
    )
    with pytest.raises(InvalidInputError, match=r"refs\.jsonl:1: .*--reward"):
        run_analysis(RunAnalysisRequest(run, tmp_path / "a", "tiny-arith"), models)
    report = run_analysis(
        RunAnalysisRequest(run, tmp_path / "b", "tiny-arith", reward_kind="numeric"), models
    )
    assert report.report is not None and report.report["rows"][0]["reward_mean"] == 0.5


def test_the_model_comes_from_the_cli_registry(
    tmp_path: Path, models: ModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[str] = []
    load = models.load

    def counted(ref: ModelRef, device: str | None = None) -> LoadedModel:
        loaded.append(ref.name)
        return load(ref, device)

    monkeypatch.setattr(models, "load", counted)
    invoke(str(RUNS / "run.jsonl"), "-o", str(tmp_path), "--steps", "1")
    assert loaded == ["tiny-arith"]


def test_an_unknown_model_fails_before_anything_is_written(tmp_path: Path) -> None:
    out, missing = tmp_path / "out", str(tmp_path / "no-such-model")  # no folder, no hub id
    result = CliRunner().invoke(
        cli, ["analyze-run", str(RUNS / "trl"), "-o", str(out), "--model", missing]
    )
    assert result.exit_code == 2
    assert "unknown model" in result.output and "available: tiny-arith" in result.output
    assert not out.exists()


def test_another_device_loads_a_copy_outside_the_cache(models: ModelRegistry) -> None:
    """A launched process's own device (or --device): a copy there, the cache left as it is."""
    if models.settings.device == "cpu":
        pytest.skip("GMTS_DEVICE=cpu: the CPU is the cache's own device")
    ref = models.resolve("tiny-arith")
    cached = models.load(ref)
    copy = models.load(ref, device="cpu")
    assert copy is not cached and copy.device.type == "cpu" and copy.name == "tiny-arith"
    assert models.load(ref) is cached


def test_bad_steps_spec_fails_clearly() -> None:
    result = CliRunner().invoke(
        cli, ["analyze-run", str(RUNS / "verl"), "-o", "/tmp/x", "--steps", "9"]
    )
    assert result.exit_code == 2 and "no step 9" in result.output


@pytest.mark.slow
def test_two_accelerate_processes_give_the_one_process_report(
    trl_report: Path, tmp_path: Path
) -> None:
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert accelerate, "accelerate is a dev dependency"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
        "-m", "app.cli", "analyze-run", str(RUNS / "trl"), "-o", str(tmp_path),
        "--methods", METHODS, "--tokens", "2",
    ]  # fmt: skip
    run(cmd, cwd=REPO, env=env)
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == [
        "steps-0.jsonl",
        "steps-1.jsonl",
    ]  # both processes took a share
    one = json.loads((trl_report / "report.json").read_text())
    two = json.loads((tmp_path / "report.json").read_text())
    assert two == one
    assert pq.read_table(tmp_path / "tokens" / "step_00002.parquet").equals(
        pq.read_table(trl_report / "tokens" / "step_00002.parquet")
    )


def test_a_step_whose_files_fail_to_write_is_not_done(
    tmp_path: Path, models: ModelRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dataset is written on a thread beside the analysis; a step's report line (what
    --resume reads as done) follows its files, so a failed write stops the analysis there and
    a resume redoes that step."""
    import gmts_core.runs.report as report

    real = report.write_step

    def fail_on_step_3(out: Path, cols: Any) -> None:
        if cols.step == 3:
            raise OSError("disk full")
        real(out, cols)

    monkeypatch.setattr(report, "write_step", fail_on_step_3)
    req = RunAnalysisRequest(RUNS / "run.jsonl", tmp_path, "tiny-arith", steps="1:3:2")
    with pytest.raises(OSError, match="disk full"):
        run_analysis(req, models)
    done = (tmp_path / "parts" / "steps-0.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in done] == [1]
    monkeypatch.setattr(report, "write_step", real)
    resumed = run_analysis(
        RunAnalysisRequest(RUNS / "run.jsonl", tmp_path, "tiny-arith", steps="1:3:2", resume=True),
        models,
    )
    assert resumed.analysed == 1
    assert AnalysedRun(tmp_path).step_numbers() == [1, 3]
