"""`gmts compare`: train with each selection method from the same start and seeds, and compare.

Writes ``compare.json`` (every curve and run), ``compare.html`` (self-contained, plotly inline)
and ``table.md`` (the final table) into ``--out``, and prints the table and one sentence per
method against the reference with its power advice (one seed: no verdict). Progress goes to
stderr: a bar on a terminal, and one line per training step otherwise (a log or a pipe sees
each step as it ends, not only the final table). ``--seed-offset``, ``--eval-seed``,
``--eval-samples`` and ``--eval-temperature`` set the noise's draws and size.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli._app import cli
from app.cli.common import (
    cli_limits,
    config_option,
    fail,
    progress_console,
    progress_lines,
    rl_option,
    services,
)
from app.services.catalog import COMPARE_DEFAULTS as COMPARE
from gmts_core.errors import GMTSError

if TYPE_CHECKING:  # the comparison imports torch: when the command runs, not for --help
    from app.services.compare import CompareResult


def _methods(text: str) -> tuple[str, ...]:
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not methods:
        raise typer.BadParameter("--methods needs at least one method, e.g. entropy,gmts")
    return methods


def _print_table(result: CompareResult, console: Console) -> None:
    from app.reports.compare_report import intervals_note, table_header, table_rows

    table = Table(title=f"{result.model}: start accuracy {result.start_accuracy:.3f}")
    for col in table_header(result):
        table.add_column(col)
    for row in table_rows(result):
        table.add_row(*row)
    console.print(table)
    console.print(intervals_note(result) + ".", highlight=False, soft_wrap=True)
    for sentence in result.conclusions():
        console.print(sentence, highlight=False, soft_wrap=True)


@cli.command("compare")
def compare_command(
    methods: Annotated[
        str, config_option("compare", "methods", note="Comma-separated.")
    ] = ",".join(COMPARE.methods),
    ratio: Annotated[float, config_option("compare", "ratio")] = COMPARE.ratio,
    steps: Annotated[int, config_option("compare", "steps")] = COMPARE.steps,
    seeds: Annotated[int, config_option("compare", "seeds")] = COMPARE.seeds,
    task_mix: Annotated[str, config_option("compare", "task_mix")] = COMPARE.task_mix,
    model: Annotated[str, typer.Option(help="Alias or local folder.")] = "tiny-arith",
    group_size: Annotated[int, rl_option("group_size")] = COMPARE.rl.group_size,
    prompts_per_step: Annotated[int, rl_option("prompts_per_step")] = COMPARE.rl.prompts_per_step,
    lr: Annotated[float, rl_option("learning_rate")] = COMPARE.rl.learning_rate,
    inner_steps: Annotated[int, rl_option("inner_steps")] = COMPARE.rl.inner_steps,
    warmup_steps: Annotated[int, rl_option("warmup_steps")] = COMPARE.rl.warmup_steps,
    decay_steps: Annotated[int, rl_option("decay_steps")] = COMPARE.rl.decay_steps,
    max_new_tokens: Annotated[int, rl_option("max_new_tokens")] = COMPARE.rl.max_new_tokens,
    eval_every: Annotated[int, config_option("compare", "eval_every")] = COMPARE.eval_every,
    eval_problems: Annotated[
        int, config_option("compare", "eval_problems")
    ] = COMPARE.eval_problems,
    seed_offset: Annotated[int, config_option("compare", "seed_offset")] = COMPARE.seed_offset,
    eval_seed: Annotated[int, config_option("compare", "eval_seed")] = COMPARE.eval_seed,
    eval_samples: Annotated[int, config_option("compare", "eval_samples")] = COMPARE.eval_samples,
    eval_temperature: Annotated[
        float, config_option("compare", "eval_temperature")
    ] = COMPARE.eval_temperature,
    threads: Annotated[int, typer.Option(help="torch CPU threads (0: torch's default).")] = 0,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("compare-out"),
) -> None:
    """Every method from the same start and seeds on the demo task: curves and a final table."""
    import torch

    from app.services.compare import compare_config, write_outputs

    if threads > 0:
        torch.set_num_threads(threads)
    try:
        config = compare_config(
            _methods(methods),
            ratio,
            steps,
            seeds,
            eval_every,
            eval_problems,
            COMPARE.rl,
            task_mix=task_mix,
            noise={
                "seed_offset": seed_offset,
                "eval_seed": eval_seed,
                "eval_samples": eval_samples,
                "eval_temperature": eval_temperature,
            },
            group_size=group_size,
            prompts_per_step=prompts_per_step,
            learning_rate=lr,
            inner_steps=inner_steps,
            warmup_steps=warmup_steps,
            decay_steps=decay_steps,
            max_new_tokens=max_new_tokens,
        )
        console = Console()
        progress = progress_console()
        total = steps * seeds * len(config.methods)
        if progress.is_terminal:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
            with Progress(*columns, TimeElapsedColumn(), console=progress) as bar:
                task = bar.add_task("compare", total=total)
                result = services().compare.run(
                    model,
                    config,
                    lambda done, _total, label: bar.update(task, completed=done, description=label),
                    cli_limits(),
                )
        else:
            result = services().compare.run(model, config, progress_lines(progress), cli_limits())
    except GMTSError as exc:
        raise fail(exc) from None
    _print_table(result, console)
    for path in write_outputs(result, out):
        console.print(f"wrote {path}")
