"""Command-line interface: `gmts analyze`, `gmts serve`, `gmts train-demo`, ...

Each command lives in its own module and registers itself on the shared Typer app.
"""

from __future__ import annotations

import importlib
import logging

import typer

from app.cli._app import cli

_COMMAND_MODULES = (
    "analyze",
    "analyze_file",
    "analyze_run",
    "serve",
    "demo",
    "gradcheck",
    "compare",
    "methods",
    "native",
)


def load_commands() -> typer.Typer:
    """The `gmts` app with every command module's commands attached."""
    for name in _COMMAND_MODULES:
        importlib.import_module(f"app.cli.{name}")
    return cli


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    load_commands()()


__all__ = ["cli", "load_commands", "main"]
