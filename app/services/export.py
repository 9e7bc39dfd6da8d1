"""Analysis downloads for every front end: CSV (one row per answer token) or JSON (the API's body).

The formats are :mod:`gmts_core.export`'s (they work on the analyze body, so a UI exports what a
remote server returned as well as a local result); here they get their media types and names.
"""

from __future__ import annotations

from typing import Any, Literal

from gmts_core.export import to_csv, to_json, write_csv

ExportFormat = Literal["csv", "json"]
MEDIA_TYPES: dict[str, str] = {"csv": "text/csv; charset=utf-8", "json": "application/json"}

__all__ = ["MEDIA_TYPES", "ExportFormat", "export_text", "write_csv"]


def export_text(body: dict[str, Any], fmt: ExportFormat) -> str:
    """The analyze body ``body`` as CSV text or as JSON text (exactly the body)."""
    return to_csv(body) if fmt == "csv" else to_json(body)
