"""One hostile corpus for every reader of outside bytes, driven by the registries.

The targets come from the registries, not from a list in a test: every registered run format
(``gmts_core.runs.READERS``, its sample run in ``tests/data/runs/<format>``), every trainer
metrics log reader (``METRICS_READERS``: the file it locates in any sample) and the analysed
datasets. A reader registered later is a new target with no new test code; one registered
without a sample fails :func:`targets` (ship a sample run with a reader).

Each target names one *victim* file its reader reads, and the corpus mutates that file
(:data:`BEFORE`: a FIFO, links out of the root at the file and at its folder, random bytes,
an empty file, a 2 GiB sparse file, JSON nested 100,000 deep, a 9 MB line, control bytes and
invalid UTF-8, a Parquet dictionary bomb; :data:`AFTER`: the same FIFO and link swapped in
while the server is up; :data:`CHURN`: the file rewritten while it is read). Run names carry
glob, quote and SQL characters. What must hold is checked by :func:`check`: every answer is
2xx or a 4xx JSON error naming no server path and no outside text.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gmts_core.run_dataset.schema import write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import write_step
from gmts_core.runs import READERS, RunLimits, open_run
from gmts_core.runs.trainer_metrics import METRICS_READERS

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
DATA_DIRS = [DATA]  # where samples are looked for (a test may add its own)
SECRET = "the outside file's secret text"
# a format's sample run where it is not tests/data/runs/<format>
SAMPLE_NAMES = {"gmts_trainer_log": "logged", "jsonl": "run.jsonl"}
ODD = "q*?[x]'\";--"  # glob, quote and SQL characters: every run name carries them


@dataclass(frozen=True)
class Target:
    """One reader: a sample it reads, the file of it the corpus mutates, the requests."""

    name: str
    sample: Path  # copied into the root for each case
    victim: str  # path of the mutated file, relative to the sample
    routes: tuple[str, ...]  # with {run} for the run's id


def sample_path(fmt: str, data: Path | None = None) -> Path:
    name = SAMPLE_NAMES.get(fmt, fmt)
    folders = [data] if data is not None else DATA_DIRS
    path = next((d / name for d in folders if (d / name).exists()), folders[0] / name)
    if not path.exists():
        raise AssertionError(
            f"the run format {fmt!r} has no sample run at {path}: a reader ships one, and the "
            "hostile corpus runs against it"
        )
    return path


def run_targets(data: Path | None = None, formats: list[str] | None = None) -> list[Target]:
    """Every registered run format: its sample, the first step's file, its routes."""
    out = []
    for fmt in formats or READERS.names():
        sample = sample_path(fmt, data)
        run = open_run(sample, fmt, RunLimits())
        ref = run.refs[0]
        victim = os.path.relpath(ref.path, sample) if sample.is_dir() else "."
        routes = ("/v1/runs/{run}", f"/v1/runs/{{run}}/steps/{ref.step}")
        out.append(Target(f"run-{fmt}", sample, victim, routes))
    return out


def log_targets(data: Path | None = None) -> list[Target]:
    """Every trainer metrics log reader, on the first sample where it finds its file."""
    out = []
    samples = [sample_path(f, data) for f in READERS.names()]
    for name in METRICS_READERS.names():
        reader = METRICS_READERS.get(name)
        for sample in samples:
            if not sample.is_dir():
                continue
            file = reader.locate(sample, RunLimits())
            if file is not None:
                victim = os.path.relpath(file, sample)
                out.append(Target(f"log-{name}", sample, victim, ("/v1/runs/{run}",)))
                break
    return out


def analysed_sample(folder: Path) -> Path:
    """A small analysed run (the format's own writer)."""
    write_manifest(folder, ("entropy", "gmts"), {})
    rng = np.random.default_rng(0)
    for step in (1, 2):
        write_step(folder, synthetic_step(step, 4, 4, rng, median_length=12))
    return folder


ANALYSED_ROUTES = (
    "/v1/analysed-runs/{run}/steps",
    "/v1/analysed-runs/{run}/steps/1/groups",
    "/v1/analysed-runs/{run}/steps/1/groups/0/answers",
    "/v1/analysed-runs/{run}/steps/1/groups/0/answers/0/tokens",
    "/v1/analysed-runs/{run}/answers?contains=a",
    "/v1/analysed-runs/{run}/answers?contains=a%20b",  # a phrase: the index's positions
    "/v1/analysed-runs/{run}/tokens",
)


def analysed_targets(sample: Path) -> list[Target]:
    """Every file the writer wrote for step 1 and every run-level file (dataset.json, the steps
    index): a file a new writer adds (an index, a table) is a victim without new test code."""
    victims = sorted(
        str(p.relative_to(sample))
        for p in sample.rglob("*")
        if p.is_file() and (p.parent == sample or p.stem == "step_00001")
    )
    assert {"dataset.json", "tokens/step_00001.parquet"} <= set(victims), victims
    return [Target(f"analysed-{v.replace('/', '-')}", sample, v, ANALYSED_ROUTES) for v in victims]


# --- the mutations: (victim file, outside folder) -> None ----------------------------------


def _fifo(victim: Path, outside: Path) -> None:
    _remove(victim)
    os.mkfifo(victim)


def _link_out(victim: Path, outside: Path) -> None:
    away = outside / f"secret-{victim.name}"
    away.write_text(SECRET + "\n")
    _remove(victim)
    victim.symlink_to(away)


def _folder_link(victim: Path, outside: Path) -> None:
    """The victim's folder replaced by a link to a copy of it outside (holding the secret)."""
    folder = victim.parent
    away = outside / f"folder-{abs(hash(str(folder)))}"
    shutil.copytree(folder, away, symlinks=True)
    (away / "SECRET.txt").write_text(SECRET)
    shutil.rmtree(folder)
    folder.symlink_to(away, target_is_directory=True)


def _garbage(victim: Path, outside: Path) -> None:
    size = max(64, victim.stat().st_size if victim.is_file() else 64)
    _write(victim, np.random.default_rng(1).bytes(min(size, 1 << 20)))


def _empty(victim: Path, outside: Path) -> None:
    _write(victim, b"")


def _sparse(victim: Path, outside: Path) -> None:
    _write(victim, b"")
    with victim.open("r+b") as f:
        f.truncate(2 << 30)


def _deep(victim: Path, outside: Path) -> None:
    _write(victim, b"[" * 100_000 + b"]" * 100_000 + b"\n")


def _long_line(victim: Path, outside: Path) -> None:
    _write(victim, b'{"x": "' + b"a" * 9_000_000 + b'"}\n')


def _control(victim: Path, outside: Path) -> None:
    _write(victim, b'{"prompt": "\x00\x1b[2J\xff\xfe", "step": 1}\n\xc3\x28\x00' * 100)


def _parquet_bomb(victim: Path, outside: Path) -> None:
    """10 million copies of one 1 KB string: a few KB on disk, 10 GB decoded."""
    values = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(10_000_000, dtype=np.int32)), pa.array(["x" * 1000])
    )
    _remove(victim)
    pq.write_table(pa.table({"text": values}), victim, compression="zstd")


BEFORE: dict[str, Callable[[Path, Path], None]] = {
    "fifo": _fifo,
    "link-out": _link_out,
    "folder-link": _folder_link,
    "garbage": _garbage,
    "empty": _empty,
    "sparse-2GiB": _sparse,
    "deep": _deep,
    "long-line": _long_line,
    "control-bytes": _control,
    "parquet-bomb": _parquet_bomb,
}
AFTER = ("fifo", "link-out")  # also swapped in once the server has read the run


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _write(path: Path, data: bytes) -> None:
    _remove(path)
    path.write_bytes(data)


def place(
    target: Target, root: Path, mutation: str | None, outside: Path, label: str | None = None
) -> tuple[str, Path]:
    """A copy of the target's sample in ``root`` under an odd name, mutated (``None``: not);
    (its run id, its victim file)."""
    run_id = f"{target.name}-{label or mutation or 'valid'}-{ODD}"
    dest = root / run_id
    if target.sample.is_dir():
        shutil.copytree(target.sample, dest, symlinks=True)
        victim = dest / target.victim
    else:
        dest = dest.with_name(dest.name + target.sample.suffix)
        run_id = dest.name
        shutil.copy(target.sample, dest)
        victim = dest
    if mutation is not None:
        if mutation == "folder-link" and (victim.parent == dest or victim == dest):
            _link_out(victim, outside)  # no folder of its own below the run: the file instead
        else:
            BEFORE[mutation](victim, outside)
    return run_id, victim


def check(text: str, status: int, root: Path, body: object | None) -> None:
    """A 2xx, or a 4xx JSON error; no server path, no outside text, no descriptor name."""
    assert status < 500, text[:500]
    if status >= 400:
        assert isinstance(body, dict) and "error" in body, text[:500]
    assert str(root) not in text and SECRET not in text, text[:500]
    assert "/proc/self/fd" not in text


def json_or_none(text: str) -> object | None:
    try:
        return json.loads(text)
    except ValueError:
        return None
