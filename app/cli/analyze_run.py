"""`gmts analyze-run RUN --model M -o OUT`: analyse a training run's dump step by step.

RUN is a trainer's dump folder or file (TRL ``completions/``, verl, ROLL, AReaL, a GMTS JSONL
or a GMTSGRPOTrainer token log; the format is detected). Writes ``OUT/report.json`` (one row
per step), ``OUT/report.html`` (charts over steps) and the analysed steps as a dataset
(``tokens/``, ``answers/``, ``steps/``, ``top/``: Parquet by step, see gmts_core.run_dataset).
Many processes: ``accelerate launch --cpu --num_processes 2 -m app.cli analyze-run ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from tqdm import tqdm

from app.cli._app import cli
from app.cli.common import (
    AdvantageOpt,
    AggregationOpt,
    RatioOpt,
    TemperatureOpt,
    analysis_option,
    fail,
    progress_console,
    progress_lines,
    services,
)
from app.services.catalog import ANALYSIS_DEFAULTS
from gmts_core.config import DEFAULT_METHODS
from gmts_core.errors import GMTSError

if TYPE_CHECKING:  # the run analysis imports torch: when the command runs, not for --help
    from app.services.run_analysis import StepReport

# The run files' size budget, larger than the server's (GMTS_RUN_MAX_*): see the limits page.
LimitOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        rich_help_panel="Run file limits",
        help="Raise this size limit of the run's files (default: the CLI's, see the limits page).",
    ),
]


class _StepProgress:
    """A bar on a terminal; otherwise one line per analysed step on stderr ("[3/10] step 30")."""

    def __init__(self, console: Console) -> None:
        self.bar = tqdm(total=0, unit="step", desc="analyzing") if console.is_terminal else None
        self.line = progress_lines(console)
        self.done, self.of = 0, 0

    def total(self, n: int) -> None:
        self.of = n
        if self.bar is not None:
            self.bar.reset(total=n)
        else:
            self.line(0, n, "steps to analyse")

    def step(self, report: StepReport | None) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        else:  # None: a step an earlier run of --resume already analysed
            label = "already analysed" if report is None else f"step {report.step}"
            self.line(self.done, self.of, label)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@cli.command("analyze-run")
def analyze_run_command(
    run: Annotated[Path, typer.Argument(exists=True, help="The run's folder or JSONL file.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Output folder.")],
    model: Annotated[
        str | None,
        typer.Option(
            help="Alias, local folder or hub id (not for trainer logs); 'none': a dump's own "
            "logged per-token numbers only, no model (prime-rl: entropy selections, mismatch)."
        ),
    ] = "tiny-arith",
    fmt: Annotated[str | None, typer.Option("--format", help="Force a run format.")] = None,
    steps: Annotated[
        str | None, typer.Option(help="START:STOP[:STRIDE] (inclusive) or 3,7,9; default all.")
    ] = None,
    tokens: Annotated[
        str,
        typer.Option(
            help="Steps written to the dataset with their per-token records: 'all', 'none' "
            "or a spec (the Runs tab opens OUT as an analysed run)."
        ),
    ] = "all",
    methods: Annotated[str, analysis_option("methods", note="Comma-separated.")] = ",".join(
        DEFAULT_METHODS
    ),
    ratio: RatioOpt = ANALYSIS_DEFAULTS.ratio,
    scope: Annotated[
        str | None,
        analysis_option("scope", note="Left out: a lone method's own (group for gmts_paper)."),
    ] = None,
    advantage: AdvantageOpt = ANALYSIS_DEFAULTS.advantage,
    aggregation: AggregationOpt = ANALYSIS_DEFAULTS.loss_aggregation,
    temperature: TemperatureOpt = ANALYSIS_DEFAULTS.temperature,
    reward: Annotated[
        str | None, typer.Option(help="Reward rule for groups the file has no rewards for.")
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted analysis in OUT.")] = False,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | mps")] = "auto",
    run_max_file_bytes: LimitOpt = None,
    run_max_line_bytes: LimitOpt = None,
    run_max_step_bytes: LimitOpt = None,
    run_max_field_chars: LimitOpt = None,
    run_max_group_answers: LimitOpt = None,
    run_max_step_rows: LimitOpt = None,
    run_max_folder_entries: LimitOpt = None,
    run_max_run_steps: LimitOpt = None,
) -> None:
    """Per-step report of a training run: rewards, zero-signal groups, coverage, waste."""
    from app.services.methods import scope_for
    from app.services.run_analysis import RunAnalysisRequest, cli_limits, run_analysis
    from gmts_core.config import AnalysisConfig

    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    req = RunAnalysisRequest(
        path=run,
        out=output,
        model=None if model is None or model.lower() == "none" else model,
        fmt=fmt,
        steps=steps,
        tokens=tokens,
        analysis=AnalysisConfig(
            methods=chosen,
            ratio=ratio,
            scope=scope_for(chosen, scope),
            advantage=advantage,
            loss_aggregation=aggregation,
            temperature=temperature,
        ),
        reward_kind=reward,
        resume=resume,
        device=device,
        limits=cli_limits(
            max_file_bytes=run_max_file_bytes,
            max_line_bytes=run_max_line_bytes,
            max_step_bytes=run_max_step_bytes,
            max_field_chars=run_max_field_chars,
            max_group_answers=run_max_group_answers,
            max_step_rows=run_max_step_rows,
            max_folder_entries=run_max_folder_entries,
            max_run_steps=run_max_run_steps,
        ),
    )
    progress = _StepProgress(progress_console())
    try:
        outcome = run_analysis(
            req,
            services().models,  # the registry every CLI command loads models through
            on_total=progress.total,
            on_step=progress.step,
        )
    except GMTSError as exc:
        raise fail(exc) from None
    finally:
        progress.close()
    for path in outcome.files:
        typer.echo(f"wrote {path}", err=True)
