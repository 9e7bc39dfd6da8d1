"""The answers' word index, second form: a word lookup per step, postings of the matches only.

``gmts analyze-run`` writes, per step, ``postings/step_NNNNN.parquet``: uncompressed rows of
up to :data:`CHUNK_WORDS` of the step's distinct words (sorted), each row holding

- ``words``: those words as one byte string, each preceded by ``\\n``, the last followed by
  one (``b"\\nan\\nthe\\n"``): every condition of a search piece is one substring of it
  (``p``: inside a word; ``\\np``: a word's start; ``p\\n``: its end; ``\\np\\n``: the word);
- ``starts``: where each word begins in ``words`` (little-endian int32);
- ``ends``: where each word's postings end in ``rows`` (int32, cumulative);
- ``rows``: the rows of the step's answers file holding each word, ascending per word
  (little-endian ``row_bytes`` wide: 2 while a step has at most 65,536 answers, else 4).

A search finds its pieces in ``words`` with a vectorised byte search (no string decoded, no SQL),
maps each hit to its word by ``starts``, and reads only those words' postings. The first form
(``words/``, :mod:`gmts_core.run_dataset.text_index`) is still read by datasets written
before this one. The bytes are untrusted: every offset used is bounds-checked before use, so a
forged file gives at most wrong rows of the step, never a read outside its arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.schema import POSTINGS_COLUMNS
from gmts_core.run_dataset.text_index import WordPlan, word_postings

CHUNK_WORDS = 1 << 20  # words a row: keeps each cell far below Parquet's 2 GiB page
# a piece's condition (text_index.plan's SQL) -> its bytes around the piece in ``words``
NEEDLES = {
    "contains(word, ?)": (b"", b""),
    "prefix(word, ?)": (b"\n", b""),
    "suffix(word, ?)": (b"", b"\n"),
    "word = ?": (b"\n", b"\n"),
}


def postings_table(step: int, texts: pa.Array | list[str]) -> pa.Table:
    """The step's postings rows (see the module's text) for its answers' ``texts``."""
    words, offsets, rows = word_postings(texts)
    m = len(texts)
    width = 2 if m <= 1 << 16 else 4
    kind = np.dtype("<u2") if width == 2 else np.dtype("<i4")
    out: dict[str, list] = {name: [] for name in POSTINGS_COLUMNS}
    for first in range(0, max(len(words), 1), CHUNK_WORDS):
        chunk = words.slice(first, CHUNK_WORDS)
        lens = pc.binary_length(chunk).to_numpy(zero_copy_only=False).astype(np.int64)
        joined = pc.binary_join(pa.ListArray.from_arrays([0, len(chunk)], chunk), "\n")[0]
        blob = b"\n" + joined.as_py().encode() + b"\n" if len(chunk) else b""
        starts = 1 + np.r_[0, np.cumsum(lens + 1)[:-1]] if len(chunk) else np.zeros(0)
        lo, hi = int(offsets[first]) if len(words) else 0, int(offsets[first + len(chunk)])
        out["step"].append(step)
        out["answers"].append(m)
        out["row_bytes"].append(width)
        out["words"].append(blob)
        out["starts"].append(starts.astype("<i4").tobytes())
        out["ends"].append(
            (offsets[first + 1 : first + len(chunk) + 1] - lo).astype("<i4").tobytes()
        )
        out["rows"].append(rows[lo:hi].astype(kind).tobytes())
    return pa.table({k: pa.array(v, POSTINGS_COLUMNS[k][0]) for k, v in out.items()})


@dataclass(frozen=True)
class Chunk:
    """One row of a postings file, its lengths checked."""

    words: np.ndarray  # uint8
    starts: np.ndarray
    ends: np.ndarray
    rows: np.ndarray


def chunks(path: str, where: str, answers: int) -> Iterator[Chunk]:
    """The rows of the postings file at ``path`` (a verified descriptor) for a step whose
    answers file has ``answers`` rows; InvalidInputError where a row's arrays do not fit."""
    try:
        table = pq.read_table(path, columns=list(POSTINGS_COLUMNS))
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{where}: cannot be read ({type(exc).__name__})") from None
    cols = {k: _one_chunk(table.column(k)) for k in POSTINGS_COLUMNS}
    for i in range(table.num_rows):
        small = {k: cols[k][i].as_py() for k in ("answers", "row_bytes")}
        width = small["row_bytes"]
        if small["answers"] != answers or width not in (2, 4):
            raise InvalidInputError(f"{where}: does not index its step's {answers} answers")
        got = {k: _cell(cols[k], i, where) for k in ("words", "starts", "ends", "rows")}
        if len(got["starts"]) % 4 or len(got["starts"]) != len(got["ends"]):
            raise InvalidInputError(f"{where}: starts and ends differ")
        if len(got["rows"]) % width:
            raise InvalidInputError(f"{where}: rows of {width} bytes do not fit")
        kind = np.dtype("<u2") if width == 2 else np.dtype("<i4")
        yield Chunk(
            np.frombuffer(got["words"], np.uint8),
            np.frombuffer(got["starts"], "<i4"),
            np.frombuffer(got["ends"], "<i4"),
            np.frombuffer(got["rows"], kind),
        )


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _cell(column: pa.Array, i: int, where: str) -> pa.Buffer:
    """The bytes of cell ``i`` of a binary column, not copied."""
    if column.is_null().to_numpy(zero_copy_only=False)[i]:
        raise InvalidInputError(f"{where}: an empty cell")
    offsets = np.frombuffer(column.buffers()[1], "<i4")[column.offset :]
    start, end = int(offsets[i]), int(offsets[i + 1])
    data = column.buffers()[2]
    if not 0 <= start <= end <= (data.size if data is not None else 0):
        raise InvalidInputError(f"{where}: a cell outside its column")
    return data.slice(start, end - start) if data is not None else pa.py_buffer(b"")


def hits(words: np.ndarray, needle: bytes) -> np.ndarray:
    """Every position of ``needle`` in ``words`` (vectorised: its first bytes compared at
    every position at once, then the rest checked at the positions left)."""
    n = len(words) - len(needle) + 1
    if n <= 0:
        return np.zeros(0, np.int64)
    mask = words[:n] == needle[0]
    for j in range(1, min(len(needle), 3)):
        mask &= words[j : n + j] == needle[j]
    found = np.flatnonzero(mask)
    for j in range(3, len(needle)):
        found = found[words[found + j] == needle[j]]
    return found


def piece_rows(chunk: Chunk, condition: str, piece: str, where: str) -> np.ndarray:
    """The answer rows (repeats possible) of ``chunk``'s words meeting one piece's condition."""
    before, after = NEEDLES[condition]
    needle = before + piece.encode() + after
    found = hits(chunk.words, needle)
    if not len(found) or not len(chunk.starts):
        return np.zeros(0, np.int64)
    # a hit's word: the last start at or before it (after the newline a needle opens with)
    words = np.searchsorted(chunk.starts, found + len(before), side="right") - 1
    words = words[(words >= 0) & (words < len(chunk.starts))]
    words = words[np.r_[True, words[1:] != words[:-1]]] if len(words) else words
    if (np.diff(words) < 0).any():  # starts out of order: not the writer's file
        raise InvalidInputError(f"{where}: words out of order")
    hi = chunk.ends[words].astype(np.int64)
    lo = np.where(words > 0, chunk.ends[np.maximum(words - 1, 0)], 0).astype(np.int64)
    if len(hi) and ((lo > hi).any() or lo.min() < 0 or hi.max() > len(chunk.rows)):
        raise InvalidInputError(f"{where}: postings out of their bounds")
    sizes = hi - lo
    if not sizes.sum():
        return np.zeros(0, np.int64)
    shift = np.repeat(lo - np.r_[0, np.cumsum(sizes)[:-1]], sizes)
    return chunk.rows[shift + np.arange(int(sizes.sum()))].astype(np.int64)


def matching(path: str, where: str, answers: int, plan: WordPlan) -> np.ndarray:
    """Which of the step's answers hold a word meeting every piece of ``plan`` (a mask)."""
    found = np.zeros((len(plan.conditions), answers), bool)
    for chunk in chunks(path, where, answers):
        for i, (condition, piece) in enumerate(zip(plan.conditions, plan.params, strict=True)):
            rows = piece_rows(chunk, condition, piece, where)
            if len(rows) and rows.max() >= answers:
                raise InvalidInputError(f"{where}: a posting past the step's answers")
            found[i, rows] = True
    return np.asarray(found.all(axis=0), bool)
