"""The registry of run readers, format detection, and :class:`Run` (a run opened for reading).

Each reader is a small class with ``detect(path)`` (does this path look like my format?),
``index(path)`` (the steps, cheaply: file names or one streaming pass) and ``load(ref)`` (one
step). :func:`open_run` picks the reader from the path (or by name) and refuses pickle dumps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gmts_core.errors import InvalidInputError
from gmts_core.registry import Registry
from gmts_core.runs.base import RunFormatError, RunStep, StepRef, UnsafeRunFormatError

logger = logging.getLogger(__name__)

# Files only pickle can read (torch.save, pickle.dump, joblib): loading one runs arbitrary code.
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".joblib", ".ckpt")


class RunReader(Protocol):
    name: str
    description: str

    def detect(self, path: Path) -> bool: ...

    def index(self, path: Path) -> list[StepRef]: ...

    def load(self, ref: StepRef) -> RunStep: ...


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

    @property
    def format(self) -> str:
        return self.reader.name

    @property
    def steps(self) -> list[int]:
        return [r.step for r in self.refs]

    def step(self, number: int) -> RunStep:
        for ref in self.refs:
            if ref.step == number:
                return self.reader.load(ref)
        raise InvalidInputError(f"{self.path}: no step {number}; steps {_span(self.steps)}")

    def iter_steps(self, steps: Iterable[int] | None = None) -> Iterator[RunStep]:
        """Load the given steps (default: all) one after the other, in run order."""
        wanted = None if steps is None else set(steps)
        for ref in self.refs:
            if wanted is None or ref.step in wanted:
                yield self.reader.load(ref)


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]} ({len(steps)} steps)"


def _pickle_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix.lower() in PICKLE_SUFFIXES else []
    return sorted(p for p in path.rglob("*") if p.suffix.lower() in PICKLE_SUFFIXES)[:3]


def _refuse_pickle(files: list[Path]) -> UnsafeRunFormatError:
    return UnsafeRunFormatError(
        files[0],
        None,
        "a pickle-based dump (torch.save / pickle, e.g. slime's .pt rollouts) is refused: "
        "loading pickle can run arbitrary code. Convert it to JSONL or parquet where it was "
        "written (one line per sample: prompt, completion, reward, step) and open that",
    )


def detect_format(path: Path) -> str:
    """The name of the first registered reader that recognizes ``path``."""
    if not path.exists():
        raise InvalidInputError(f"{path}: no such file or folder")
    for name in READERS.names():
        if READERS.get(name).detect(path):
            return name
    pickles = _pickle_files(path)
    if pickles:
        raise _refuse_pickle(pickles)
    raise RunFormatError(
        path,
        None,
        "not a run this tool can read; known formats: " + ", ".join(READERS.names()),
    )


def open_run(path: str | Path, fmt: str | None = None) -> Run:
    """Open a run folder or file; ``fmt`` forces a format (see :func:`list_formats`)."""
    path = Path(path)
    if path.is_file() and path.suffix.lower() in PICKLE_SUFFIXES:
        raise _refuse_pickle([path])
    name = fmt or detect_format(path)
    reader = READERS.get(name)
    refs = reader.index(path)
    if not refs:
        raise RunFormatError(path, None, f"no steps found ({name} format)")
    return Run(path, reader, refs)
