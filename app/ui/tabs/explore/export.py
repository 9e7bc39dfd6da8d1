"""Download files of the current analysis: CSV (one row per token) and JSON (the API's body).

The formats are the export service's; this module only writes them to files Gradio can serve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.services.export import export_text
from app.ui.downloads import content_tag, write_download


def write_exports(result: dict[str, Any], folder: Path | None = None) -> tuple[Path, Path]:
    """Write ``result`` as CSV and JSON files; returns their paths (named by content hash)."""
    json_text = export_text(result, "json")
    name = f"analysis-{content_tag(json_text)}"  # the CSV is named by the same content
    csv_path = write_download(export_text(result, "csv"), name, "csv", folder)
    return csv_path, write_download(json_text, name, "json", folder)
