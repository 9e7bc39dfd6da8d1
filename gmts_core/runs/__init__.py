"""Training runs: read what trainers dump (TRL, verl, ROLL, AReaL, our JSONL and trainer log)
as steps -> groups, lazily, one step at a time. See :func:`open_run`."""

from gmts_core.runs.base import (
    NotARunError,
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    UnsafeRunFormatError,
)
from gmts_core.runs.limits import CLI_LIMITS, LIMIT_NAMES, RunLimitError, RunLimits
from gmts_core.runs.registry import READERS, Run, detect_format, list_formats, open_run

# Readers register themselves on import; the order is the detection order (most specific
# first: the trainer log sits next to TRL's completions folder and says more).
from gmts_core.runs import trainer_log as _trainer_log  # noqa: E402,F401  isort: skip
from gmts_core.runs import trl as _trl  # noqa: E402,F401  isort: skip
from gmts_core.runs import roll as _roll  # noqa: E402,F401  isort: skip
from gmts_core.runs import verl as _verl  # noqa: E402,F401  isort: skip
from gmts_core.runs import areal as _areal  # noqa: E402,F401  isort: skip
from gmts_core.runs import jsonl as _jsonl  # noqa: E402,F401  isort: skip

__all__ = [
    "CLI_LIMITS",
    "LIMIT_NAMES",
    "NotARunError",
    "READERS",
    "Run",
    "RunFormatError",
    "RunGroup",
    "RunLimitError",
    "RunLimits",
    "RunStep",
    "StepRef",
    "UnsafeRunFormatError",
    "detect_format",
    "list_formats",
    "open_run",
]
