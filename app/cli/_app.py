"""The `gmts` Typer application object; command modules attach their commands to it."""

from __future__ import annotations

import typer

cli = typer.Typer(
    name="gmts",
    help="GMTS Explorer: which answer tokens drive learning in RLVR, and what training does.",
    no_args_is_help=True,
    add_completion=False,
)


@cli.callback()
def _root() -> None:
    """GMTS Explorer: which answer tokens drive learning in RLVR, and what training on them does."""
