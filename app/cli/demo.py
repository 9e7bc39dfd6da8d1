"""`gmts demo-path`, `gmts train-demo`, `gmts eval-demo`: the bundled demo model ``tiny-arith``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from app.cli._app import cli
from app.cli.common import config_option, knob_option, progress_console, progress_lines
from app.services.demo import (
    DEMO_EVAL_DEFAULTS as EVAL,
)
from app.services.demo import (
    DEMO_MODEL_DIR,
    DEMO_TRAIN_DEFAULTS,
    FLAW_RATE,
    evaluate_demo,
    train_demo,
)

TRAIN = DEMO_TRAIN_DEFAULTS

_FIGURES = (
    ("accuracy_t1", "accuracy, temperature 1.0 (all sampled answers)"),
    ("accuracy_greedy", "accuracy, greedy"),
    ("mixed_group_share", "groups with mixed rewards"),
    ("fork_share_top_entropy", "top-20%-entropy tokens at fork points (whole set)"),
    ("fork_share_top_entropy_per_group", "... ranked within each group (mean)"),
    ("fork_token_share", "fork tokens among all answer tokens (base rate)"),
    ("mean_answer_tokens", "answer length, tokens (with <eos>)"),
)


def _loss_lines(console: Console) -> Callable[[int, int, float], None]:
    """One ``[done/total] loss L`` line per optimizer step."""
    tick = progress_lines(console)
    return lambda done, total, loss: tick(done, total, f"loss {loss:.4f}")


@cli.command("demo-path")
def demo_path_command() -> None:
    """Print the folder of the bundled demo model (a Hugging Face model folder)."""
    typer.echo(str(DEMO_MODEL_DIR))


@cli.command("train-demo")
def train_demo_command(
    out: Annotated[
        Path,
        typer.Option(
            help="Folder to write the model to (a new folder in the current directory by "
            "default; the bundled model is replaced only when its folder is named here)."
        ),
    ] = Path("tiny-arith-retrained"),
    seed: Annotated[int, config_option("demo_train", "seed")] = TRAIN.seed,
    steps: Annotated[int, config_option("demo_train", "steps")] = TRAIN.steps,
    batch_size: Annotated[int, config_option("demo_train", "batch_size")] = TRAIN.batch_size,
    lr: Annotated[float, config_option("demo_train", "lr")] = TRAIN.lr,
    flaw_rate: Annotated[float, knob_option(FLAW_RATE)] = TRAIN.mix.flaw_rate,
) -> None:
    """Train the demo model from scratch (seeded; minutes on a CPU) and save it to OUT.

    Progress goes to stderr: a bar on a terminal, else one line per optimizer step."""
    start = time.perf_counter()
    progress = progress_console()
    on_step = None if progress.is_terminal else _loss_lines(progress)  # None: tqdm's bar
    folder = train_demo(out, seed, steps, batch_size, lr, flaw_rate, on_step)
    typer.echo(f"saved {folder} ({time.perf_counter() - start:.0f}s)")


@cli.command("eval-demo")
def eval_demo_command(
    model: Annotated[Path, typer.Option(help="Model folder.")] = DEMO_MODEL_DIR,
    num_prompts: Annotated[int, config_option("demo_eval", "num_prompts")] = EVAL.num_prompts,
    group_size: Annotated[
        int, config_option("sampling", "num_samples")
    ] = EVAL.sampling.num_samples,
    seed: Annotated[
        int, config_option("sampling", "seed", note="Also draws the prompts.")
    ] = EVAL.sampling.seed,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Measure a demo model on held-out prompts: accuracy, mixed groups, fork-point entropy."""
    if not (model / "config.json").is_file():
        raise typer.BadParameter(
            f"{model} is not a model folder (no config.json)", param_hint="--model"
        )
    result = evaluate_demo(model, num_prompts, group_size, seed)
    if as_json:
        typer.echo(json.dumps({"model": str(model), "seed": seed, **result}))
        return
    table = Table(title=f"{model.name}: {num_prompts} held-out prompts x {group_size} samples")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, label in _FIGURES:
        value = result[key]
        table.add_row(label, f"{value:.1f}" if key == "mean_answer_tokens" else f"{value:.1%}")
    Console().print(table)
