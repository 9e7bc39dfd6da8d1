"""The `gmts` Typer application object; command modules attach their commands to it.

The commands' modules import the services (and so torch and transformers: seconds), so the
group imports a command's module only when that command is run or asked for its help:
``gmts --help`` lists the commands from :data:`COMMANDS`, whose one-line helps a test keeps
equal to the commands' own.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# command name -> (its module in app.cli, its one-line help), in the order `gmts --help` lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": (
        "analyze",
        "Entropy, gradient magnitude and GMTS rank of every answer token of one group.",
    ),
    "analyze-file": (
        "analyze_file",
        "Analyze every group of a rollout dump (one JSON object per line) with a progress bar.",
    ),
    "analyze-run": (
        "analyze_run",
        "Per-step report of a training run: rewards, zero-signal groups, coverage, waste.",
    ),
    "serve": ("serve", "Serve the HTTP API, its docs at /docs and the UI at /ui."),
    "demo-path": (
        "demo",
        "Print the folder of the bundled demo model (a Hugging Face model folder).",
    ),
    "train-demo": (
        "demo",
        "Train the demo model from scratch (seeded; minutes on a CPU) and save it to OUT.",
    ),
    "eval-demo": (
        "demo",
        "Measure a demo model on held-out prompts: accuracy, mixed groups, fork-point entropy.",
    ),
    "gradcheck": (
        "gradcheck",
        "Exact full-parameter gradient norm of each answer token, and how well each score "
        "ranks it.",
    ),
    "compare": (
        "compare",
        "Every method from the same start and seeds on the demo task: curves and a final table.",
    ),
    "methods": (
        "methods",
        "List the selection methods: name, kind, one-line description, citation.",
    ),
    "native": (
        "native",
        "The C kernels of the statistics and the sampler: build them ahead, or see their state.",
    ),
}

_LISTING = "gmts.listing"  # set in the context's meta while the group's own help is drawn


class LazyCommands(TyperGroup):
    """The `gmts` group: each command's module is imported on first use of that command."""

    # Typer ships its own Click: its types are reached through TyperGroup, not `click`
    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS) + [name for name in self.commands if name not in COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        module, short_help = COMMANDS[cmd_name]
        if ctx.meta.get(_LISTING):  # a line of the list: the name and its help are enough
            return TyperCommand(cmd_name, short_help=short_help)
        importlib.import_module(f"app.cli.{module}")
        command = typer.main.get_command(cli)
        assert isinstance(command, TyperGroup)
        self.commands.update(command.commands)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        ctx.meta[_LISTING] = True
        try:
            super().format_help(ctx, formatter)
        finally:
            ctx.meta.pop(_LISTING, None)


cli = typer.Typer(
    name="gmts",
    cls=LazyCommands,
    help="GMTS Explorer: which answer tokens drive learning in RLVR, and what training does.",
    no_args_is_help=True,
    add_completion=False,
)


@cli.callback()
def _root() -> None:
    """GMTS Explorer: which answer tokens drive learning in RLVR, and what training on them does."""
