"""Reports for people, outside the numeric library: plotly figures and self-contained HTML
(the compare report, the run report), shared by the CLI and the UI."""
