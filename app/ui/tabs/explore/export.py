"""Download files of the current analysis: CSV (one row per token) and JSON (the API's body).

The formats are the export service's; this module only writes them to files Gradio can serve.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

from app.services.export import export_text

MAX_AGE_S = 3600.0


def export_dir() -> Path:
    """A per-user temp folder for export files (old files are pruned on each export)."""
    folder = Path(tempfile.gettempdir()) / "gmts-ui-exports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def prune(folder: Path, max_age_s: float = MAX_AGE_S) -> None:
    cutoff = time.time() - max_age_s
    for f in folder.glob("gmts-analysis-*"):
        try:
            if f.stat().st_mtime < cutoff:
                f.unlink()
        except FileNotFoundError:  # another worker pruned it first
            continue


def write_exports(result: dict[str, Any], folder: Path | None = None) -> tuple[Path, Path]:
    """Write ``result`` as CSV and JSON files; returns their paths (named by content hash)."""
    folder = folder or export_dir()
    prune(folder)
    json_text = export_text(result, "json")
    tag = hashlib.sha256(json_text.encode()).hexdigest()[:12]
    csv_path = folder / f"gmts-analysis-{tag}.csv"
    json_path = folder / f"gmts-analysis-{tag}.json"
    csv_path.write_text(export_text(result, "csv"), encoding="utf-8", newline="")
    json_path.write_text(json_text, encoding="utf-8")
    return csv_path, json_path
