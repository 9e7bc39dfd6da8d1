"""Where the UI's static assets are: ``app/ui/static`` (a link to the top-level ``static/`` in a
source checkout; real files in an installed wheel), found through importlib.resources."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

STATIC_DIR = Path(str(files("app.ui").joinpath("static")))
FAVICON = STATIC_DIR / "favicon.ico"
