"""The limits page lists every server setting (one source: app/core/config.py's Settings)."""

from __future__ import annotations

from pathlib import Path

from app.core.config import Settings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_every_setting_is_in_the_limits_table() -> None:
    rows = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    listed = " ".join(rows)  # the settings table, and the run files' budget table
    missing = [n for n in Settings.model_fields if f"`GMTS_{n.upper()}`" not in listed]
    assert not missing, f"docs/settings.md has no row for: {missing}"


def test_the_page_says_where_sessions_live_and_what_a_restart_keeps() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "## Sessions: where they live, what a restart keeps" in text
    assert "GMTS_SESSION_STATE_DIR" in text and "safetensors" in text
