"""What the trainer itself measured: the per-step scalar metrics a trainer logs (reward,
entropy, response length, loss, clip ratio...) read from its own log file, next to a run's
rollouts, so a run's charts can show them beside what GMTS computes from the rollouts.

A :class:`MetricsReader` finds its format's file below a run folder (``locate``) and reads it
(``read``) within the run's :class:`~gmts_core.runs.limits.RunLimits`: the file through
:func:`~gmts_core.runs.files.open_run_file` (a regular file inside the run root, at most
``max_step_bytes`` for a file parsed whole, ``max_file_bytes`` for a JSONL log streamed line by
line), every value validated (:func:`~gmts_core.runs.values.check_json`; a metric that is not
a finite number of at most :data:`~gmts_core.runs.values.MAX_ABS_NUMBER` is left out, as the
trainer's own charts leave out NaN), at most ``max_run_steps`` steps. Only the series of
:data:`STANDARD` are kept (each under the trainer's own name, :attr:`TrainerMetrics.keys`),
thinned evenly to :data:`MAX_POINTS` steps; the other metric names are listed, not read.
Readers are registered in ``gmts_core/runs/__init__.py`` (:func:`register_metrics_reader`);
:func:`find_trainer_metrics` asks each in turn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gmts_core.registry import Registry
from gmts_core.runs.limits import RunLimits
from gmts_core.runs.values import MAX_ABS_NUMBER, MAX_STEP, as_int

# The series a chart of a run can show, in this order; a reader maps each to its own names.
STANDARD = (
    "reward",  # mean reward of the step's answers
    "reward_std",
    "entropy",  # mean per-token entropy of the policy on the step's answers (nats)
    "response_length",  # mean answer length (tokens)
    "zero_std_share",  # share of groups whose rewards are all equal
    "loss",
    "grad_norm",
    "kl",
    "clip_ratio",
    "learning_rate",
)
MAX_POINTS = 2_000  # steps kept for a chart (evenly spaced, first and last included)
MAX_NAMES = 1_024  # metric names listed
MAX_NAME_CHARS = 200  # a longer name is not listed (counted as not listed)


@dataclass
class TrainerMetrics:
    """A trainer's own per-step metrics: ``series[name][i]`` is the value at ``steps[i]``
    (None where that step did not log it)."""

    format: str  # the reader's name
    source: str  # the file read
    steps: list[int]
    series: dict[str, list[float | None]]  # standard name -> values (only names logged)
    keys: dict[str, str]  # standard name -> the trainer's own metric name
    names: list[str]  # metric names in the log (sorted; the first MAX_NAMES seen)
    names_truncated: bool  # the log holds more names than listed
    num_steps: int  # steps logged (before thinning to MAX_POINTS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MetricsReader(Protocol):
    name: str
    description: str

    def locate(self, path: Path, limits: RunLimits) -> Path | None: ...

    def read(self, file: Path, limits: RunLimits) -> TrainerMetrics: ...


METRICS_READERS: Registry[MetricsReader] = Registry("trainer metrics format")


def register_metrics_reader(reader: MetricsReader) -> MetricsReader:
    """Add a reader; formats are tried in registration order."""
    METRICS_READERS.register(reader.name)(reader)
    return reader


def find_trainer_metrics(path: Path, limits: RunLimits) -> TrainerMetrics | None:
    """The trainer's own metrics logged in the run at ``path`` (the first registered reader
    that finds its file), or None when it holds none."""
    path = Path(path)
    for name in METRICS_READERS.names():
        reader = METRICS_READERS.get(name)
        file = reader.locate(path, limits)
        if file is not None:
            return reader.read(file, limits)
    return None


def metric_value(value: Any) -> float | None:
    """A logged metric as a float: None unless a finite number (bools and text are not
    metrics) of at most MAX_ABS_NUMBER in magnitude."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_ABS_NUMBER else None


@dataclass
class MetricsAccumulator:
    """Collects, step by step, the standard series of a log whose lines hold one step's
    metrics each (several lines of one step merge, a later value winning), bounded by
    ``max_run_steps`` steps and :data:`MAX_NAMES` names."""

    # standard name -> the trainer's names for it, preferred first
    candidates: Mapping[str, tuple[str, ...]]
    limits: RunLimits
    path: Path
    values: dict[int, dict[str, float]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    more_names: bool = False

    def add(self, step: Any, metrics: Mapping[str, Any], line: int | None) -> None:
        """The metrics one line (or log entry) ``line`` holds for ``step``."""
        number = as_int(step, "the step number", self.path, line, -MAX_STEP, MAX_STEP)
        row = self.values.get(number)
        if row is None:
            where = f"{self.path}:{line}" if line is not None else str(self.path)
            self.limits.check("max_run_steps", len(self.values) + 1, where, "more steps logged")
            row = self.values[number] = {}
        for name, value in metrics.items():
            if name not in self.names:
                if len(self.names) < MAX_NAMES and len(name) <= MAX_NAME_CHARS:
                    self.names.add(name)
                else:
                    self.more_names = True
            number_value = metric_value(value)
            if number_value is not None:
                row[name] = number_value
        # keep only what a chart can show: the row's other values are dropped at once
        wanted = {n for names in self.candidates.values() for n in names}
        for name in [n for n in row if n not in wanted]:
            del row[name]

    def result(self, fmt: str, source: Path) -> TrainerMetrics:
        steps = sorted(self.values)
        logged = {n for row in self.values.values() for n in row}
        keys = {
            std: next(n for n in names if n in logged)
            for std, names in self.candidates.items()
            if any(n in logged for n in names)
        }
        kept = evenly(steps, MAX_POINTS)
        series = {
            std: [self.values[s].get(keys[std]) for s in kept] for std in STANDARD if std in keys
        }
        names = sorted(self.names)
        return TrainerMetrics(
            format=fmt,
            source=str(source),
            steps=kept,
            series=series,
            keys={std: keys[std] for std in STANDARD if std in keys},
            names=names,
            names_truncated=self.more_names,
            num_steps=len(steps),
        )


def evenly(steps: list[int], n: int) -> list[int]:
    """At most ``n`` of ``steps``, evenly spaced, the first and the last kept."""
    if len(steps) <= n:
        return steps
    return [steps[round(i * (len(steps) - 1) / (n - 1))] for i in range(n)]
