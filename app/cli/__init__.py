"""Command-line interface: `gmts analyze`, `gmts serve`, `gmts train-demo`, ...

Each command lives in its own module and registers itself on the shared Typer app; the app
imports a command's module only when that command runs (``gmts --help`` imports no torch).
"""

from __future__ import annotations

import importlib
import logging

import typer

from app.cli._app import COMMANDS, cli


def load_commands() -> typer.Typer:
    """The `gmts` app with every command module's commands attached (for the reference docs
    and the tests that walk every command; `gmts` itself imports a command's module on use)."""
    for module in dict.fromkeys(module for module, _ in COMMANDS.values()):
        importlib.import_module(f"app.cli.{module}")
    return cli


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cli()


__all__ = ["cli", "load_commands", "main"]
