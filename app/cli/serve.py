"""`gmts serve`: run the API (and the UI at /ui) with uvicorn, on 127.0.0.1:8000 by default."""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli._app import cli

if TYPE_CHECKING:  # the settings (pydantic-settings) and uvicorn: when serving, not for --help
    from app.core.config import Settings

logger = logging.getLogger(__name__)

WATCHDOG_MARGIN_S = 5.0  # after the grace period, cancelled jobs get this long to stop


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging, with every line (access log included) carrying the request id."""
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "app.api.middleware.RequestIdFilter"}},
        "formatters": {
            "default": {
                "()": "uvicorn.logging.DefaultFormatter",
                "fmt": "%(levelprefix)s [%(request_id)s] %(name)s: %(message)s",
            },
            "access": {
                "()": "uvicorn.logging.AccessFormatter",
                "fmt": '%(levelprefix)s [%(request_id)s] %(client_addr)s - "%(request_line)s" '
                "%(status_code)s",
            },
        },
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["request_id"],
                "stream": "ext://sys.stderr",
            },
            "access": {
                "class": "logging.StreamHandler",
                "formatter": "access",
                "filters": ["request_id"],
                "stream": "ext://sys.stdout",
            },
        },
        "loggers": {
            "": {"handlers": ["default"], "level": level},
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["access"], "level": level, "propagate": False},
        },
    }


def make_server(app: Any, settings: Settings) -> Any:
    """A uvicorn server with bounded, graceful shutdown (``GMTS_SHUTDOWN_GRACE_S``).

    On SIGTERM/SIGINT uvicorn stops accepting connections and gives running requests
    ``shutdown_grace_s``; then every job is cancelled (it stops at its next stage boundary, see
    app.services.jobs, and its client gets a 503), uvicorn cancels what is left half a margin
    later, and a watchdog ends the process if it is still alive ``WATCHDOG_MARGIN_S`` after the
    grace period (a stage that does not return).
    """
    import uvicorn  # the server, only for `gmts serve` (keeps the other commands light)

    from app.server_options import http_options

    grace = settings.shutdown_grace_s
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=log_config(settings.log_level),
        # a float works (asyncio.wait_for)
        timeout_graceful_shutdown=grace + WATCHDOG_MARGIN_S / 2,  # type: ignore[arg-type]
        **http_options(settings),
    )
    services = getattr(getattr(app, "state", None), "services", None)

    class GracefulServer(uvicorn.Server):
        _watchdog: threading.Timer | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self._watchdog is None:
                logger.info("shutting down: requests get %g s to finish", grace)
                self._watchdog = threading.Timer(grace + WATCHDOG_MARGIN_S, _force_exit)
                self._watchdog.daemon = True
                self._watchdog.start()
                if services is not None:
                    stop = threading.Timer(
                        grace, services.jobs.cancel_all, ("the server is shutting down",)
                    )
                    stop.daemon = True
                    stop.start()
            super().handle_exit(sig, frame)

    return GracefulServer(config)


def _force_exit() -> None:
    logger.error("shutdown did not finish within the grace period: exiting now")
    os._exit(1)


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
    from app.core.config import Settings
    from app.main import create_app  # FastAPI, every route and the UI: only for `gmts serve`

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
    make_server(create_app(settings), settings).run()
