"""`gmts compare`: train with each selection method from the same start and seeds, and compare.

Writes ``compare.json`` (every curve and run), ``compare.html`` (self-contained, plotly inline)
and ``table.md`` (the final table) into ``--out``, and prints the table.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from app.cli._app import cli
from app.cli.common import fail, load_cli_model
from app.ui.palette import method_color
from gmts_core.compare import (
    COMPARE_RECIPE,
    DEFAULT_METHODS,
    CompareConfig,
    CompareResult,
    run_compare,
)
from gmts_core.compare_report import TABLE_HEADER, compare_html, table_markdown, table_rows
from gmts_core.errors import GMTSError


def _methods(text: str) -> tuple[str, ...]:
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not methods:
        raise typer.BadParameter("--methods needs at least one method, e.g. entropy,gmts")
    return methods


def write_outputs(result: CompareResult, out: Path) -> list[Path]:
    """compare.json, compare.html and table.md in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.json", out / "compare.html", out / "table.md"]
    paths[0].write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    paths[1].write_text(compare_html(result, method_color))
    paths[2].write_text(table_markdown(result) + "\n")
    return paths


def _print_table(result: CompareResult, console: Console) -> None:
    table = Table(title=f"{result.model}: start accuracy {result.start_accuracy:.3f}")
    for col in TABLE_HEADER:
        table.add_column(col)
    for row in table_rows(result):
        table.add_row(*row)
    console.print(table)


@cli.command("compare")
def compare_command(
    methods: Annotated[str, typer.Option(help="Comma-separated methods.")] = ",".join(
        DEFAULT_METHODS
    ),
    ratio: Annotated[float, typer.Option(help="Share of tokens each method selects.")] = 0.2,
    steps: Annotated[int, typer.Option(help="GRPO steps per run.")] = CompareConfig.steps,
    seeds: Annotated[int, typer.Option(help="Seeds per method.")] = CompareConfig.seeds,
    model: Annotated[str, typer.Option(help="Alias or local folder.")] = "tiny-arith",
    group_size: Annotated[int, typer.Option(help="Answers per prompt (G).")] = 8,
    prompts_per_step: Annotated[
        int, typer.Option(help="Prompts per step.")
    ] = COMPARE_RECIPE.prompts_per_step,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = COMPARE_RECIPE.learning_rate,
    inner_steps: Annotated[
        int, typer.Option(help="Updates per batch.")
    ] = COMPARE_RECIPE.inner_steps,
    warmup_steps: Annotated[
        int, typer.Option(help="Linear learning-rate warmup steps.")
    ] = COMPARE_RECIPE.warmup_steps,
    max_new_tokens: Annotated[int, typer.Option(help="Longest sampled answer.")] = 48,
    eval_every: Annotated[int, typer.Option(help="Evaluate every N steps.")] = 10,
    eval_problems: Annotated[int, typer.Option(help="Held-out problems.")] = 200,
    threads: Annotated[int, typer.Option(help="torch CPU threads (0: torch's default).")] = 0,
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("compare-out"),
) -> None:
    """Every method from the same start and seeds on the demo task: curves and a final table."""
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        lm = load_cli_model(model)
        config = CompareConfig(
            methods=_methods(methods),
            ratio=ratio,
            steps=steps,
            seeds=seeds,
            eval_every=eval_every,
            eval_problems=eval_problems,
            rl=dataclasses.replace(
                COMPARE_RECIPE,
                group_size=group_size,
                prompts_per_step=prompts_per_step,
                learning_rate=lr,
                inner_steps=inner_steps,
                warmup_steps=warmup_steps,
                max_new_tokens=max_new_tokens,
            ),
        )
        config.validate()
        console = Console()
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, TimeElapsedColumn(), console=console) as bar:
            task = bar.add_task("compare", total=steps * seeds * len(config.methods))
            result = run_compare(
                lm,
                config,
                lambda done, _total, label: bar.update(task, completed=done, description=label),
            )
    except GMTSError as exc:
        raise fail(exc) from None
    _print_table(result, console)
    for path in write_outputs(result, out):
        console.print(f"wrote {path}")
