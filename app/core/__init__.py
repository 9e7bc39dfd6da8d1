"""Server configuration (settings)."""
