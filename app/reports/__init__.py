"""Reports for people, outside the numeric library: plotly figures and self-contained HTML."""
