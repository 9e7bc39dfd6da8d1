"""Report pages and their figures (plotly, no web framework): shared by the CLI and the UI."""
