"""Analysed runs as datasets: per-token Parquet tables by step, written by ``gmts analyze-run``
and queried with DuckDB (:class:`AnalysedRun`). See :mod:`gmts_core.run_dataset.schema`."""

from gmts_core.run_dataset.query import ANSWER_ORDERS, AnalysedRun, QueryLimits, Scan
from gmts_core.run_dataset.schema import (
    FORMAT,
    TOP_K,
    TOP_ORDERS,
    VERSION,
    check_manifest,
    is_dataset,
    schema,
)
from gmts_core.run_dataset.writer import StepColumns, write_step

__all__ = [
    "ANSWER_ORDERS",
    "FORMAT",
    "TOP_K",
    "TOP_ORDERS",
    "VERSION",
    "AnalysedRun",
    "QueryLimits",
    "Scan",
    "StepColumns",
    "check_manifest",
    "is_dataset",
    "schema",
    "write_step",
]
