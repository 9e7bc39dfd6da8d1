"""The registry of run readers, format detection, and :class:`Run` (a run opened for reading).

Each reader is a small class with ``detect(path)`` (does this path look like my format?),
``index(path)`` (the steps, cheaply: file names or one streaming pass) and ``load(ref)`` (one
step), each within a :class:`~gmts_core.runs.limits.RunLimits` budget. :func:`open_run` picks
the reader from the path (or by name) and refuses pickle dumps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gmts_core.errors import InvalidInputError
from gmts_core.progress import checkpoint
from gmts_core.registry import Registry
from gmts_core.runs.base import (
    NotARunError,
    RunFormatError,
    RunStep,
    StepRef,
    UnsafeRunFormatError,
    check_step,
)
from gmts_core.runs.limits import RunLimits, scan_folder

logger = logging.getLogger(__name__)

# Files only pickle can read (torch.save, pickle.dump, joblib): loading one runs arbitrary code.
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".joblib", ".ckpt")


class RunReader(Protocol):
    name: str
    description: str

    def detect(self, path: Path, limits: RunLimits) -> bool: ...

    def index(self, path: Path, limits: RunLimits) -> list[StepRef]: ...

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep: ...


READERS: Registry[RunReader] = Registry("run format")


def register_reader(reader: RunReader) -> RunReader:
    """Add a reader; formats are tried in registration order when detecting."""
    READERS.register(reader.name)(reader)
    return reader


def list_formats() -> list[str]:
    return READERS.names()


@dataclass
class Run:
    """A run opened for reading: its format, its steps, and one step at a time on demand."""

    path: Path
    reader: RunReader
    refs: list[StepRef]
    limits: RunLimits = field(default_factory=RunLimits)
    # loads one step (a reading process: gmts_core.runs.worker); None: the reader, here
    loader: Callable[[Run, StepRef], RunStep] | None = field(default=None, repr=False)

    @property
    def format(self) -> str:
        return self.reader.name

    @property
    def steps(self) -> list[int]:
        return [r.step for r in self.refs]

    def step(self, number: int) -> RunStep:
        for ref in self.refs:
            if ref.step == number:
                return self._load(ref)
        raise InvalidInputError(f"{self.path}: no step {number}; steps {_span(self.steps)}")

    def iter_steps(self, steps: Iterable[int] | None = None) -> Iterator[RunStep]:
        """Load the given steps (default: all) one after the other, in run order."""
        wanted = None if steps is None else set(steps)
        for ref in self.refs:
            if wanted is None or ref.step in wanted:
                yield self._load(ref)

    def _load(self, ref: StepRef) -> RunStep:
        checkpoint()
        step = self.reader.load(ref, self.limits) if self.loader is None else self.loader(self, ref)
        return check_step(step, self.limits)


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]} ({len(steps)} steps)"


def _pickle_files(path: Path, limits: RunLimits, depth: int = 3) -> list[Path]:
    """Up to 3 pickle files in ``path`` and its folders (``depth`` levels; each listing
    bounded by ``max_folder_entries``)."""
    if path.is_file():
        return [path] if path.suffix.lower() in PICKLE_SUFFIXES else []
    found, folders = [], [path]
    for _ in range(depth):
        below = []
        for folder in folders:
            for e in sorted(scan_folder(folder, limits), key=lambda e: e.name):
                if e.is_dir(follow_symlinks=False):
                    below.append(Path(e.path))
                elif e.name.lower().endswith(PICKLE_SUFFIXES):
                    found.append(Path(e.path))
        if found or not below:
            break
        folders = below[:64]
    return found[:3]


def _refuse_pickle(files: list[Path]) -> UnsafeRunFormatError:
    return UnsafeRunFormatError(
        files[0],
        None,
        "a pickle-based dump (torch.save / pickle, e.g. miles' and slime's train_data .pt "
        "files) is refused: loading pickle can run arbitrary code (slime's rollout_data/N.pt "
        "are read, only with torch.load(weights_only=True): open the folder holding them). "
        "miles also writes a Parquet mirror of the per-token columns, "
        "dashboard_columns/rollout_N.parquet (with polars installed: pip install "
        "'miles[dashboard]'), which this tool reads (format miles); else convert the dump to "
        "JSONL or parquet where it was written (one line per sample: prompt, completion, "
        "reward, step) and open that",
    )


def detect_format(path: Path, limits: RunLimits | None = None) -> str:
    """The name of the first registered reader that recognizes ``path``."""
    limits = limits or RunLimits()
    if not path.exists():
        raise InvalidInputError(f"{path}: no such file or folder")
    for name in READERS.names():
        if READERS.get(name).detect(path, limits):
            return name
    pickles = _pickle_files(path, limits)
    if pickles:
        raise _refuse_pickle(pickles)
    raise NotARunError(
        path,
        None,
        "not a run this tool can read; known formats: " + ", ".join(READERS.names()),
    )


def open_run(path: str | Path, fmt: str | None = None, limits: RunLimits | None = None) -> Run:
    """Open a run folder or file; ``fmt`` forces a format (see :func:`list_formats`).
    ``limits`` bounds every reading of the run (default: the server's :class:`RunLimits`)."""
    path = Path(path)
    limits = limits or RunLimits()
    if path.is_file() and path.suffix.lower() in PICKLE_SUFFIXES:
        raise _refuse_pickle([path])
    name = fmt or detect_format(path, limits)
    reader = READERS.get(name)
    refs = reader.index(path, limits)
    if not refs:
        raise RunFormatError(path, None, f"no steps found ({name} format)")
    return Run(path, reader, refs, limits)
