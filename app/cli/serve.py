"""`gmts serve`: run the API (and the UI at /ui) with uvicorn, on 127.0.0.1:8000 by default."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.cli._app import cli
from app.core.config import Settings


def _overrides(**values: Any) -> dict[str, Any]:
    """Only the options given on the command line override the GMTS_* environment."""
    return {k: v for k, v in values.items() if v is not None}


def display_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}"


@cli.command("serve")
def serve_command(
    host: Annotated[str | None, typer.Option(help="Interface (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000).")] = None,
    model: Annotated[
        str | None, typer.Option(help="Default model alias or folder (default tiny-arith).")
    ] = None,
    api_url: Annotated[
        str | None, typer.Option(help="Run the UI against this remote GMTS backend.")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="uvicorn log level.")] = None,
) -> None:
    """Serve the HTTP API, its docs at /docs and the UI at /ui."""
    import uvicorn

    from app.main import create_app

    settings = Settings(
        **_overrides(
            host=host, port=port, default_model=model, api_url=api_url, log_level=log_level
        )
    )
    url = display_url(settings.host, settings.port)
    typer.echo(f"GMTS Explorer on {url}")
    if settings.ui_enabled:
        typer.echo(f"  UI:   {url}/ui")
    typer.echo(f"  docs: {url}/docs")
    typer.echo(f"  default model: {settings.default_model}")
    uvicorn.run(
        create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level
    )
