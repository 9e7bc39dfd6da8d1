"""`gmts methods`: every selection method with its one-line description and citation."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from app.cli._app import cli


@cli.command("methods")
def methods_command(
    details: Annotated[
        bool, typer.Option("--details", help="Also show formula, constants and choices.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object, as GET /v1/methods.")
    ] = False,
) -> None:
    """List the selection methods: name, kind, one-line description, citation."""
    from app.services.methods import list_method_infos  # the registry imports torch: not for --help

    infos = list_method_infos()
    if as_json:
        typer.echo(json.dumps({"methods": [dataclasses.asdict(m) for m in infos]}, indent=1))
        return
    table = Table(title="Selection methods (selection.methods, gmts compare --methods)")
    for col in ("method", "kind", "description", "citation"):
        table.add_column(col, overflow="fold")
    if details:
        table.add_column("details", overflow="fold")
    for m in infos:
        row = [m.name, m.kind, m.description, m.citation]
        table.add_row(*(row + [m.details] if details else row))
    Console(width=200 if details else 160).print(table)
