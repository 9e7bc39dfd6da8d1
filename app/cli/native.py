"""`gmts native build` and `gmts native info`: the library's C kernels, compiled ahead of time.

Without `gmts native build` the kernels are compiled by `gmts serve` at startup, or by any other
command at its first use (a few seconds); the Dockerfile runs it so the image ships them built.
"""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli._app import cli

native_cli = typer.Typer(
    help="The C kernels of the statistics and the sampler: build them ahead, or see their state.",
    no_args_is_help=True,
)
cli.add_typer(native_cli, name="native")


@native_cli.command("build")
def build_command(
    force: Annotated[
        bool, typer.Option("--force", help="Compile again even if a valid library is cached.")
    ] = False,
) -> None:
    """Compile the kernels for this machine's CPU into the cache and print where they went."""
    from app.services.native import build_native  # imports torch: not for --help

    try:
        info = build_native(force=force)
    except RuntimeError as exc:
        typer.echo(f"gmts native build: {exc}", err=True)
        raise typer.Exit(1) from exc
    if info.state != "ready":
        typer.echo(f"gmts native build: built, but {info.state}: {info.reason}", err=True)
        raise typer.Exit(1)
    typer.echo(str(info.library))
    for line in info.lines()[1:]:
        typer.echo(line, err=True)


@native_cli.command("info")
def info_command() -> None:
    """Whether a compiled kernel library is cached and valid, with its flags and the cache
    folder; compiles nothing. Exit code 0 when ready, 1 otherwise."""
    from app.services.native import native_info  # imports torch: not for --help

    info = native_info()
    for line in info.lines():
        typer.echo(line)
    if info.state != "ready":
        raise typer.Exit(1)
