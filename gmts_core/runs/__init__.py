"""Training runs: read what trainers dump (TRL, prime-rl, NeMo-RL, open-instruct, verl, ROLL,
AReaL, miles, slime, our JSONL and trainer log) as steps -> groups, lazily, one step at a time
(:func:`open_run`); and what the trainer itself measured per step, from its own metrics log
(:func:`find_trainer_metrics`)."""

from gmts_core.runs.areal import ArealReader
from gmts_core.runs.base import (
    NotARunError,
    RunFormatError,
    RunGroup,
    RunStep,
    StepRef,
    UnsafeRunFormatError,
)
from gmts_core.runs.jsonl import JSONLReader
from gmts_core.runs.limits import CLI_LIMITS, LIMIT_NAMES, RunLimitError, RunLimits
from gmts_core.runs.miles import MilesReader
from gmts_core.runs.nemo_rl import NeMoRLReader
from gmts_core.runs.open_instruct import OpenInstructReader
from gmts_core.runs.prime_rl import PrimeRLReader
from gmts_core.runs.registry import (
    READERS,
    Run,
    detect_format,
    list_formats,
    open_run,
    register_reader,
)
from gmts_core.runs.roll import ROLLReader
from gmts_core.runs.slime import SlimeReader
from gmts_core.runs.trainer_log import TrainerLogReader
from gmts_core.runs.trainer_metrics import (
    METRICS_READERS,
    TrainerMetrics,
    find_trainer_metrics,
    register_metrics_reader,
)
from gmts_core.runs.trl import TRLReader
from gmts_core.runs.trl_state import TRLStateReader
from gmts_core.runs.verl import VerlReader
from gmts_core.runs.verl_tracking import VerlTrackingReader

# Every reader is registered here, in the detection order (most specific first: the trainer
# log sits next to TRL's completions folder and says more; a JSONL file is the fallback).
register_reader(TrainerLogReader())
register_reader(TRLReader())
register_reader(PrimeRLReader())
register_reader(NeMoRLReader())
register_reader(OpenInstructReader())
register_reader(ROLLReader())
register_reader(VerlReader())
register_reader(ArealReader())
register_reader(MilesReader())
register_reader(SlimeReader())  # after miles: a miles dump's Parquet mirror is read, not its .pt
register_reader(JSONLReader())

# The trainers' own metrics logs, in the order a run folder is searched for them.
register_metrics_reader(TRLStateReader())
register_metrics_reader(VerlTrackingReader())

__all__ = [
    "CLI_LIMITS",
    "LIMIT_NAMES",
    "METRICS_READERS",
    "NotARunError",
    "READERS",
    "Run",
    "RunFormatError",
    "RunGroup",
    "RunLimitError",
    "RunLimits",
    "RunStep",
    "StepRef",
    "TrainerMetrics",
    "UnsafeRunFormatError",
    "detect_format",
    "find_trainer_metrics",
    "list_formats",
    "open_run",
]
