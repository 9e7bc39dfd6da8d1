"""GMTSGRPOTrainer(log_selection=True): the token log holds exactly the mask TRL applied, sits
next to TRL's completions log, and opens as a run (analyze-run's logged mode)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from gmts_core.analysis.analyze import AnalysisConfig
from gmts_core.analysis.summaries import gradient_coverage
from gmts_core.integrations.trl import GMTSGRPOTrainer
from gmts_core.methods.selection import top_k_count
from gmts_core.runs import RunLimits, find_trainer_metrics, open_run
from gmts_core.runs.report import (
    RunAnalysisPlan,
    analyze_run_shard,
    merge_report,
    prepare_output,
    settings_of,
)
from tests.gmts_core.integrations.test_trl import make_trainer, model_dir, tiny_config  # noqa: F401
from tests.multiprocess import torchrun

RATIO = 0.25


class CapturingTrainer(GMTSGRPOTrainer):
    """Records, for every loss call, the batch's completion ids, TRL's mask and the mask
    this trainer returned to TRL's loss (what it multiplied the per-token loss by)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.applied: list[dict[str, torch.Tensor]] = []
        super().__init__(*args, **kwargs)

    def get_high_entropy_mask(
        self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float
    ) -> torch.Tensor:
        out = super().get_high_entropy_mask(entropies, mask, threshold)
        assert self._batch is not None
        self.applied.append(
            {
                "ids": self._batch["completion_ids"].clone(),
                "valid": mask.bool().clone(),
                "mask": out.clone(),
                "advantages": self._batch["advantages"].clone(),
            }
        )
        return out


@pytest.fixture(scope="module")
def trained(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> CapturingTrainer:  # noqa: F811
    out = tmp_path_factory.mktemp("logged-run")
    trainer = make_trainer(
        model_dir,
        out,
        cls=CapturingTrainer,
        config=tiny_config(out, log_completions=True),
        token_selection="gmts",
        selection_ratio=RATIO,
        log_selection=True,
    )
    trainer.train()
    return trainer


def test_logged_selected_flags_equal_the_mask_trl_applied(trained: CapturingTrainer) -> None:
    folder = Path(trained.args.output_dir) / "gmts_selection"
    files = sorted(folder.glob("selection_*.parquet"))
    assert [f.name for f in files] == ["selection_00001.parquet", "selection_00002.parquet"]
    assert len(trained.applied) == 2  # one loss call per step here
    for f, applied in zip(files, trained.applied, strict=True):
        df = pd.read_parquet(f).sort_values(["micro_batch", "answer", "position"])
        valid, mask = applied["valid"], applied["mask"]
        assert len(df) == int(valid.sum())
        assert int(df["selected"].sum()) == top_k_count(RATIO, len(df)) == int(mask.sum())
        for row in range(valid.shape[0]):
            mine = df[df["answer"] == row]
            assert mine["token_id"].tolist() == applied["ids"][row][valid[row]].tolist()
            assert mine["selected"].tolist() == mask[row][valid[row]].tolist()
            assert mine["advantage"].tolist() == pytest.approx(
                [float(applied["advantages"][row])] * len(mine)
            )
        assert (df["selected"] == df["selected_gmts"]).all()  # the active method is GMTS
        assert (df["method"] == "gmts").all() and df["omega"].isna().all()


def test_the_log_opens_as_a_run_next_to_trls_completions(trained: CapturingTrainer) -> None:
    out = Path(trained.args.output_dir)
    log, trl = open_run(out), open_run(out, "trl")
    assert log.format == "gmts_trainer_log" and log.steps == trl.steps == [1, 2]
    for a, b in zip(log.iter_steps(), trl.iter_steps(), strict=True):
        logged = sorted(ans for g in a.groups for ans in g.answers)
        assert logged == sorted(ans for g in b.groups for ans in g.answers)
        assert all(
            len(ids) == len(g.token_columns["selected"][i])
            for g in a.groups
            for i, ids in enumerate(g.token_ids or [])
        )


def test_logged_report_shows_the_applied_mask(trained: CapturingTrainer, tmp_path: Path) -> None:
    run = open_run(Path(trained.args.output_dir))
    plan = RunAnalysisPlan(tuple(run.steps))
    config = AnalysisConfig(ratio=RATIO)
    prepare_output(tmp_path, settings_of(run, None, config, plan), resume=False)
    assert analyze_run_shard(run, None, config, plan, tmp_path) == 2
    rows = merge_report(tmp_path, run.steps)["rows"]
    assert all(r["mode"] == "logged" and r["extra"]["method"] == "gmts" for r in rows)
    logs = [h for h in trained.state.log_history if "gmts/selected_fraction" in h]
    for row, log, f in zip(
        rows,
        logs,
        sorted(Path(trained.args.output_dir).glob("gmts_selection/*.parquet")),
        strict=True,
    ):
        df = pd.read_parquet(f)
        proxy = torch.tensor(df["grad_proxy"].to_numpy())
        expected = gradient_coverage(proxy, torch.tensor(df["selected"].to_numpy()))
        assert row["gradient_coverage"]["applied"] == pytest.approx(expected)
        assert row["selected_count"]["applied"] == int(df["selected"].sum())
        assert row["selected_count"]["applied"] / row["num_tokens"] == pytest.approx(
            log["gmts/selected_fraction"]
        )
        if "gmts/gradient_coverage" in log:
            assert row["gradient_coverage"]["applied"] == pytest.approx(
                log["gmts/gradient_coverage"]
            )


def test_example_writes_both_logs(model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    import sys

    repo = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(repo / "examples"))
    try:
        import train_trl_gmts
    finally:
        sys.path.remove(str(repo / "examples"))
    out = tmp_path / "out"
    train_trl_gmts.main(
        [
            *("--model", str(model_dir), "--max-steps", "1", "--num-problems", "4"),
            *("--num-generations", "4", "--batch-size", "4", "--max-completion-length", "12"),
            *("--eval-problems", "0", "--output-dir", str(out), "--use-cpu"),
        ]
    )
    assert (out / "completions" / "completions_00001.parquet").is_file()
    assert open_run(out).format == "gmts_trainer_log" and open_run(out).steps == [1]
    metrics = find_trainer_metrics(out, RunLimits())  # trainer_state.json: what TRL logged
    assert metrics is not None and metrics.steps == [1] and "entropy" in metrics.series


TWO_PROCESS_SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
import json
from pathlib import Path
from tests.gmts_core.integrations.test_trl import make_trainer, tiny_config
from tests.gmts_core.integrations.test_trl_log import CapturingTrainer
out = Path({out!r})
trainer = make_trainer(Path({model!r}), out, cls=CapturingTrainer,
    config=tiny_config(out, max_steps=1, max_completion_length=12), selection_ratio=0.3,
    log_selection=True)
trainer.train()
a = trainer.applied[0]
json.dump({{"ids": a["ids"][a["valid"]].tolist(), "mask": a["mask"][a["valid"]].tolist()}},
    open(out / f"rank{{trainer.accelerator.process_index}}.json", "w"))
"""


@pytest.mark.slow
def test_two_processes_log_the_global_batch_and_each_applied_slice(
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    repo = Path(__file__).resolve().parents[3]
    script = tmp_path / "run.py"
    script.write_text(
        TWO_PROCESS_SCRIPT.format(repo=str(repo), model=str(model_dir), out=str(tmp_path))
    )
    torchrun(script, cwd=repo)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    df = pd.read_parquet(tmp_path / "gmts_selection" / "selection_00001.parquet")
    df = df.sort_values(["answer", "position"])
    assert df["token_id"].tolist() == ranks[0]["ids"] + ranks[1]["ids"]  # process order
    assert df["selected"].tolist() == ranks[0]["mask"] + ranks[1]["mask"]
    assert int(df["selected"].sum()) == top_k_count(0.3, len(df))  # one global top-k
