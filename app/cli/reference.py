"""The `gmts` command as one Click object with every command attached: what the documentation
site's CLI reference is generated from (mkdocs-click reads ``app.cli.reference:command``)."""

from __future__ import annotations

import typer

from app.cli import load_commands

command = typer.main.get_command(load_commands())
