"""Command-line interface: `gmts analyze`, `gmts serve`, `gmts train-demo`, ...

Each command lives in its own module and registers itself on the shared Typer app; the app
imports a command's module only when that command runs (``gmts --help`` imports no torch).
"""

from __future__ import annotations

import importlib
import logging
import os

import typer

from app.cli._app import COMMANDS, cli


def load_commands() -> typer.Typer:
    """The `gmts` app with every command module's commands attached (for the reference docs
    and the tests that walk every command; `gmts` itself imports a command's module on use)."""
    for module in dict.fromkeys(module for module, _ in COMMANDS.values()):
        importlib.import_module(f"app.cli.{module}")
    return cli


OPENMP_WAIT_POLICY = "PASSIVE"
"""``OMP_WAIT_POLICY`` for every ``gmts`` command unless the user set one: an OpenMP thread
with no work sleeps at once instead of spinning. Set before torch loads its OpenMP runtime,
which reads it once. On a machine whose other work keeps its cores busy, spinning threads wait
at every barrier for a colleague the scheduler has put aside: a decoding step's products of 8
rows took 0.8-1.5 s with 2 threads spinning against 0.06-0.1 s sleeping (load average 4-7 on
2 cores; docs/benchmarks.md)."""


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("OMP_WAIT_POLICY", OPENMP_WAIT_POLICY)
    cli()


__all__ = ["cli", "load_commands", "main"]
