"""Command-line interface: `gmts analyze`, `gmts serve`, `gmts train-demo`, ...

Each command lives in its own module and registers itself on the shared Typer app.
"""

from __future__ import annotations

import importlib
import logging

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
)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in _COMMAND_MODULES:
        importlib.import_module(f"app.cli.{name}")
    cli()


__all__ = ["cli", "main"]
