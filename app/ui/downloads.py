"""Files the UI offers for download, and the self-contained HTML page they share.

Every download (an analysis's CSV and JSON, the Explore view, a run's step, an analysed run) is
written to one per-user temporary folder, named by its content's hash (so two people's files
never overwrite each other), and files older than an hour are pruned on each write. An HTML
download is one page that opens alone, offline: the UI's stylesheet and token script and
plotly.js inlined, every part rendered by the same functions as the live page.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from html import escape
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from app.ui.assets import STATIC_DIR

MAX_AGE_S = 3600.0
PREFIX = "gmts-"


def export_dir() -> Path:
    """A per-user temp folder for export files (old files are pruned on each export)."""
    folder = Path(tempfile.gettempdir()) / "gmts-ui-exports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def prune(folder: Path, max_age_s: float = MAX_AGE_S) -> None:
    cutoff = time.time() - max_age_s
    for f in folder.glob(PREFIX + "*"):
        try:
            if f.stat().st_mtime < cutoff:
                f.unlink()
        except FileNotFoundError:  # another worker pruned it first
            continue


def content_tag(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def write_download(text: str, name: str, suffix: str, folder: Path | None = None) -> Path:
    """Write ``text`` to ``gmts-<name>-<hash>.<suffix>`` in the export folder; its path."""
    folder = folder or export_dir()
    prune(folder)
    path = folder / f"{PREFIX}{name}-{content_tag(text)}.{suffix}"
    path.write_text(text, encoding="utf-8", newline="")
    return path


def standalone_page(title: str, source: str, body: str, figures: list[go.Figure]) -> str:
    """One HTML page: a line saying where it came from, ``body`` (the UI's own HTML), then the
    figures, with the UI's CSS and JS and plotly.js (once) inlined."""
    css = "".join(
        (STATIC_DIR / name).read_text(encoding="utf-8") for name in ("gmts.css", "gmts-page.css")
    )
    js = (STATIC_DIR / "gmts.js").read_text(encoding="utf-8")
    charts = "".join(
        "<div class='chart'>"
        + pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False)
        + "</div>"
        for i, fig in enumerate(figures)
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>body{{font-family:system-ui,sans-serif;"
        f"margin:1.5em;max-width:1100px}}.source{{color:#555;font-size:13px}}{css}</style>"
        "</head><body>"
        f"<p class='source'>{escape(source)}</p>{body}"
        f"<div id='charts'>{charts}</div>"
        f"<script>{js}</script></body></html>"
    )
