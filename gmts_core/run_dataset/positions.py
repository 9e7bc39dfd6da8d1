"""The answers' word index, third form: each word's answers and positions, so a phrase is found
in the index (word adjacency and the separators between), with no text read.

``gmts analyze-run`` writes, per step, ``positions/step_NNNNN.idx``: a little-endian binary file
(not Parquet: a search reads byte ranges of it with ``pread``, never the whole file)::

    magic   b"GMTSPOS1"
    header  8 x int64: step, answers (M), words (V), occurrences (W), separators (S),
            postings (R), row_bytes (2 or 4), sep_bytes (2 or 4)
    table   10 x (offset, length) int64, one per section, in this order:
      words      the step's distinct words, sorted, each after a newline, a newline last
      starts     int32 x V: where each word begins in ``words``
      row_ends   int32 x V: where each word's answer rows end in ``rows`` (cumulative)
      rows       row_bytes x R: the answers (rows of the answers file) holding each word
      pos_ends   int32 x V: where each word's positions end in ``positions`` (cumulative)
      positions  int32 x W: each word's occurrences, ascending, as ordinals in the step's words
                 in text order (answer by answer)
      first      int32 x (M + 1): the ordinal of each answer's first word (cumulative; W last)
      sep_ends   int32 x S: where each distinct separator ends in ``sep_text``
      sep_text   the separators' UTF-8 bytes, one after another
      seps       sep_bytes x (W + M): per answer, the separator before its first word, then the
                 one after each of its words (the empty separator where none)

A *word* is a maximal run of ``[0-9a-z_]`` in the text lower-cased by Arrow's ``utf8_lower``;
a *separator* a maximal run of anything else (or the empty string at an answer's edge).

**When the index is exact.** A search for ``q`` matches the answers whose lower-cased text holds
the lower-cased ``q`` (Arrow's ``utf8_lower`` on both, literal). ``q`` lower-cased splits into
the same runs: its word runs ``w1 … wk`` and the separators between them are whole runs of a
matching text (a run of ``q`` bounded by runs of the other kind in ``q`` is bounded so in the
text), except its first run, which may continue to the left (a word or separator ending with
it), and its last, which may continue to the right (one starting with it). So ``q`` occurs in
an answer exactly where ``k`` consecutive words of that answer meet those conditions and the
separators between them (and before the first / after the last, where ``q`` starts or ends
with one) meet theirs: a phrase answered from the index is exact, never checked against the
texts. A ``q`` of a single word run is answered from the words' answer rows (as the second
form does); one with no word character is searched by reading the texts, and one of more
than :data:`MAX_RUNS` runs by checking the texts of its first word's answers.

The bytes are untrusted: the header, the table and every offset used are bounds-checked before
use, so a forged file gives at most wrong rows of its step (InvalidInputError where it does not
hold together), never a read outside the file or an array.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.postings import NEEDLES, Chunk, hits
from gmts_core.run_dataset.text_index import lower, split_words

MAGIC = b"GMTSPOS1"
SECTIONS = (
    "words",
    "starts",
    "row_ends",
    "rows",
    "pos_ends",
    "positions",
    "first",
    "sep_ends",
    "sep_text",
    "seps",
)
HEADER = struct.Struct("<8s8q")
TABLE = struct.Struct(f"<{2 * len(SECTIONS)}q")
TOP = HEADER.size + TABLE.size
RUNS = re.compile(r"[0-9a-z_]+|[^0-9a-z_]+")
WORD_CHARS = re.compile(r"[0-9a-z_]")
MAX_SEPARATORS = 1 << 24  # distinct separators a step's file may name
MANY_READS = 256  # more runs of ids (or entries) than this: a section read whole
FEW_READS = 32  # separators looked up one by one (more: their section read whole)
MAX_RUNS = 256  # runs of a phrase answered from the index (longer: its candidates' texts read)


# --- writing ---------------------------------------------------------------------------------


def positions_bytes(step: int, texts: pa.Array | list[str]) -> bytes:
    """The step's positions file (see the module's text) for its answers' ``texts``."""
    lowered, vocab, rank, parent, m = split_words(texts)
    v, w = len(vocab), len(rank)
    # answer rows per word: (word, answer) pairs, repeats dropped
    codes = np.sort(rank * max(m, 1) + parent)
    codes = codes[np.r_[True, codes[1:] != codes[:-1]]] if len(codes) else codes
    word_of_row, rows = np.divmod(codes, max(m, 1))
    row_ends = np.cumsum(np.bincount(word_of_row, minlength=v)) if v else np.zeros(0, np.int64)
    # positions per word: ordinals in text order, grouped by word (ascending within each)
    keys = np.sort(rank * max(w, 1) + np.arange(w, dtype=np.int64))
    positions = keys % max(w, 1)
    pos_ends = np.cumsum(np.bincount(rank, minlength=v)) if v else np.zeros(0, np.int64)
    first = np.r_[0, np.cumsum(np.bincount(parent, minlength=m))].astype(np.int64)
    # separators: the text split at its words gives, per answer, its words' count + 1 runs
    seps = pc.list_flatten(pc.split_pattern_regex(lowered, r"[0-9a-z_]+"))
    if len(seps) != w + m:
        raise InvalidInputError(f"step {step}: {len(seps)} separators for {w} words in {m} texts")
    encoded = seps.dictionary_encode()
    sep_vocab = encoded.dictionary.cast(pa.binary())
    lens = pc.binary_length(sep_vocab).to_numpy(zero_copy_only=False).astype(np.int64)
    sep_text = b"".join(sep_vocab.to_pylist()) if len(sep_vocab) else b""
    word_lens = pc.binary_length(vocab).to_numpy(zero_copy_only=False).astype(np.int64)
    words = b"\n" + "\n".join(vocab.to_pylist()).encode() + b"\n" if v else b""
    starts = 1 + np.r_[0, np.cumsum(word_lens + 1)[:-1]] if v else np.zeros(0, np.int64)
    row_kind = "<u2" if m <= 1 << 16 else "<i4"
    sep_kind = "<u2" if len(sep_vocab) <= 1 << 16 else "<i4"
    sections = [
        words,
        starts.astype("<i4").tobytes(),
        row_ends.astype("<i4").tobytes(),
        rows.astype(row_kind).tobytes(),
        pos_ends.astype("<i4").tobytes(),
        positions.astype("<i4").tobytes(),
        first.astype("<i4").tobytes(),
        np.cumsum(lens).astype("<i4").tobytes(),
        sep_text,
        encoded.indices.to_numpy(zero_copy_only=False).astype(sep_kind).tobytes(),
    ]
    header = HEADER.pack(
        MAGIC, step, m, v, w, len(sep_vocab), len(rows), int(row_kind[-1]), int(sep_kind[-1])
    )
    table, at = [], TOP
    for data in sections:
        table += [at, len(data)]
        at += len(data)
    return b"".join([header, TABLE.pack(*table), *sections])


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    step: int
    answers: int
    words: int
    occurrences: int
    separators: int
    postings: int
    row_bytes: int
    sep_bytes: int


class PositionsFile:
    """One step's positions file on a verified descriptor: its header and table checked
    against the file's size and the step's ``answers`` (InvalidInputError naming ``where``);
    sections read with ``pread``, each within its bounds."""

    def __init__(self, fd: int, where: str, answers: int) -> None:
        self.fd, self.where = fd, where
        size = os.fstat(fd).st_size
        top = os.pread(fd, TOP, 0)
        if len(top) < TOP or top[:8] != MAGIC:
            raise InvalidInputError(f"{where}: not a positions file")
        magic, *numbers = HEADER.unpack(top[: HEADER.size])
        h = Header(*numbers)
        self.header = h
        if h.answers != answers:
            raise InvalidInputError(f"{where}: does not index its step's {answers} answers")
        if h.row_bytes not in (2, 4) or h.sep_bytes not in (2, 4):
            raise InvalidInputError(f"{where}: entries of {h.row_bytes}/{h.sep_bytes} bytes")
        if h.answers > 1 << 16 and h.row_bytes == 2 or h.separators > 1 << 16 and h.sep_bytes == 2:
            raise InvalidInputError(f"{where}: entries too narrow for their values")
        counts = (h.words, h.occurrences, h.separators, h.postings)
        if min(counts) < 0 or max(counts) >= 1 << 31 or h.separators > MAX_SEPARATORS:
            raise InvalidInputError(f"{where}: counts out of range")
        table = TABLE.unpack(top[HEADER.size :])
        self.spans = dict(zip(SECTIONS, zip(table[0::2], table[1::2], strict=True), strict=True))
        want = {
            "starts": 4 * h.words,
            "row_ends": 4 * h.words,
            "rows": h.row_bytes * h.postings,
            "pos_ends": 4 * h.words,
            "positions": 4 * h.occurrences,
            "first": 4 * (h.answers + 1),
            "sep_ends": 4 * h.separators,
            "seps": h.sep_bytes * (h.occurrences + h.answers),
        }
        for name, (at, length) in self.spans.items():
            if at < TOP or length < 0 or at + length > size:
                raise InvalidInputError(f"{where}: section {name} outside the file")
            if name in want and length != want[name]:
                raise InvalidInputError(f"{where}: section {name} of {length:,} bytes")
        self._first: np.ndarray | None = None
        self._chunk: Chunk | None = None

    def read(self, name: str, lo: int = 0, hi: int | None = None, kind: str = "<i4") -> np.ndarray:
        """Entries ``[lo, hi)`` of section ``name`` as ``kind`` (bytes: ``"u1"``)."""
        at, length = self.spans[name]
        size = np.dtype(kind).itemsize
        end = length // size if hi is None else hi
        if not 0 <= lo <= end <= length // size:
            raise InvalidInputError(f"{self.where}: a read outside section {name}")
        data = os.pread(self.fd, (end - lo) * size, at + lo * size)
        if len(data) != (end - lo) * size:  # shrunk since it was opened
            raise InvalidInputError(f"{self.where}: shorter than its table says")
        return np.frombuffer(data, kind)

    def words_chunk(self) -> Chunk:
        """The words and their starts (no postings; read once), as the second form's
        :class:`~gmts_core.run_dataset.postings.Chunk`."""
        if self._chunk is None:
            empty = np.zeros(0, "<i4")
            self._chunk = Chunk(self.read("words", kind="u1"), self.read("starts"), empty, empty)
        return self._chunk

    def first(self) -> np.ndarray:
        """Each answer's first word ordinal, then W: checked ascending from 0 to W."""
        if self._first is None:
            first = self.read("first").astype(np.int64)
            if first[0] != 0 or first[-1] != self.header.occurrences or (np.diff(first) < 0).any():
                raise InvalidInputError(f"{self.where}: answers' words out of order")
            self._first = first
        return self._first

    def separators(self) -> list[bytes]:
        ends = self.read("sep_ends").astype(np.int64)
        text = self.read("sep_text", kind="u1").tobytes()
        if len(ends) and (ends[-1] > len(text) or (np.diff(np.r_[0, ends]) < 0).any()):
            raise InvalidInputError(f"{self.where}: separators out of their bounds")
        lo = np.r_[0, ends[:-1]] if len(ends) else ends
        return [text[a:b] for a, b in zip(lo.tolist(), ends.tolist(), strict=True)]

    def lists(self, ends: str, data: str, ids: np.ndarray, kind: str = "<i4") -> np.ndarray:
        """The entries of ``data`` of these ids (ascending) in one array, each id's list
        ``data[ends[id - 1] : ends[id]]``: read per run of consecutive ids, or whole where the
        runs are many."""
        if not len(ids):
            return np.zeros(0, np.int64)
        if ids[0] < 0 or ids[-1] >= self.header.words:
            raise InvalidInputError(f"{self.where}: a word past the step's words")
        runs = np.flatnonzero(np.r_[True, np.diff(ids) != 1])
        firsts, lasts = ids[runs], ids[np.r_[runs[1:] - 1, len(ids) - 1]]
        if len(runs) > MANY_READS:
            whole_ends = self.read(ends).astype(np.int64)
            hi = whole_ends[ids]
            lo = np.where(ids > 0, whole_ends[np.maximum(ids - 1, 0)], 0)
            entries = self.read(data, kind=kind)
            if (lo > hi).any() or lo.min() < 0 or hi.max() > len(entries):
                raise InvalidInputError(f"{self.where}: {data} out of their bounds")
            sizes = hi - lo
            shift = np.repeat(lo - np.r_[0, np.cumsum(sizes)[:-1]], sizes)
            return entries[shift + np.arange(int(sizes.sum()))].astype(np.int64)
        out = []
        for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True):
            bounds = self.read(ends, max(a - 1, 0), b + 1).astype(np.int64)
            first, last = (int(bounds[0]) if a > 0 else 0), int(bounds[-1])
            if first > last:
                raise InvalidInputError(f"{self.where}: {data} out of their bounds")
            out.append(self.read(data, first, last, kind=kind).astype(np.int64))
        return np.concatenate(out)

    def positions_of(self, words: np.ndarray) -> np.ndarray:
        """The positions of these word ids (ascending), unsorted across words."""
        found = self.lists("pos_ends", "positions", words)
        if len(found) and (found.min() < 0 or found.max() >= self.header.occurrences):
            raise InvalidInputError(f"{self.where}: a position past the step's words")
        return found

    def rows_of(self, words: np.ndarray) -> np.ndarray:
        """The answer rows holding these word ids (ascending), repeats possible."""
        kind = "<u2" if self.header.row_bytes == 2 else "<i4"
        found = self.lists("row_ends", "rows", words, kind)
        if len(found) and (found.min() < 0 or found.max() >= self.header.answers):
            raise InvalidInputError(f"{self.where}: a posting past the step's answers")
        return found

    def word(self, i: int) -> bytes:
        """Word ``i`` (from the words read once: a binary search's probe)."""
        chunk = self.words_chunk()
        size = len(chunk.words)
        lo = int(chunk.starts[i])
        hi = int(chunk.starts[i + 1]) - 1 if i + 1 < len(chunk.starts) else size - 1
        lo, hi = max(0, min(lo, size)), max(0, min(hi, size))
        return chunk.words[lo : max(lo, hi)].tobytes()

    def seps_at(self, at: np.ndarray) -> np.ndarray:
        """Entries ``at`` of ``seps`` (each within it: the callers' arithmetic on checked
        ordinals), checked below the step's separators."""
        kind = "<u2" if self.header.sep_bytes == 2 else "<i4"
        if len(at) > FEW_READS:
            found = self.read("seps", kind=kind)[at].astype(np.int64)
        else:
            found = np.array(
                [int(self.read("seps", a, a + 1, kind=kind)[0]) for a in at.tolist()], np.int64
            )
        if len(found) and (found.min() < 0 or found.max() >= self.header.separators):
            raise InvalidInputError(f"{self.where}: a separator past the step's separators")
        return found


def word_ids(file: PositionsFile, condition: str, piece: str) -> np.ndarray:
    """The ids (ascending) of the words meeting ``condition`` (``"word"``: equal to ``piece``;
    ``"prefix"``: starting with it; ``"suffix"``: ending with it): a binary search of the
    sorted words (a few small reads), a byte search of them all for a suffix."""
    n = file.header.words
    needle = piece.encode()
    if condition == "suffix":
        chunk = file.words_chunk()
        found = hits(chunk.words, needle + b"\n")
        if not len(found) or not n:
            return np.zeros(0, np.int64)
        ids = np.searchsorted(chunk.starts, found, side="right") - 1
        return np.unique(ids[(ids >= 0) & (ids < n)])
    lo = bisect.bisect_left(range(n), needle, key=file.word)
    if condition == "word":
        hi = bisect.bisect_right(range(n), needle, lo=lo, key=file.word)
    else:
        hi = bisect.bisect_left(range(n), needle + b"\xff", lo=lo, key=file.word)
    return np.arange(lo, hi, dtype=np.int64)


@dataclass(frozen=True)
class Phrase:
    """A search's runs, lower-cased: its words, each with the condition on the text's word at
    its place, the separators between them, and the one it opens or ends with (if any)."""

    words: tuple[tuple[str, str], ...]  # (condition, piece)
    between: tuple[bytes, ...]  # len(words) - 1 separators, each a whole separator
    lead: bytes | None  # q opens with this separator: the text's ends with it
    trail: bytes | None  # q ends with this one: the text's starts with it


def phrase(query: str) -> Phrase | None:
    """The phrase of ``query`` for the positions index; None when it has no word character
    or is one word alone (the answer rows serve it) or has more than MAX_RUNS runs (then the
    index gives candidates only: their texts are checked)."""
    lowered = lower(query)
    runs = [m.group() for m in RUNS.finditer(lowered)]
    words = [i for i, r in enumerate(runs) if WORD_CHARS.match(r)]
    if not words or len(runs) == 1 or len(runs) > MAX_RUNS:
        return None
    conditions = []
    for i in words:
        open_left, open_right = i == 0, i == len(runs) - 1
        conditions.append(("suffix" if open_left else "prefix" if open_right else "word", runs[i]))
    between = tuple(r.encode() for r in runs[words[0] + 1 : words[-1]] if not WORD_CHARS.match(r))
    return Phrase(
        tuple(conditions),
        between,
        runs[0].encode() if words[0] > 0 else None,
        runs[-1].encode() if words[-1] < len(runs) - 1 else None,
    )


def phrase_mask(file: PositionsFile, p: Phrase) -> np.ndarray:
    """Which of the step's answers hold the phrase (a mask over its answers), from the index:
    the words' positions intersected, fewest first, then the separators checked."""
    h = file.header
    mask = np.zeros(h.answers, bool)
    ids = []
    for condition, piece in p.words:
        found = word_ids(file, condition, piece)
        if not len(found):
            return mask
        ids.append(found)
    k = len(ids)
    start: np.ndarray | None = None
    for j in sorted(range(k), key=lambda j: _count(file, ids[j])):
        found = file.positions_of(ids[j]) - j  # where the phrase would start
        if start is None:
            start = found[(found >= 0) & (found + k <= h.occurrences)]
        else:
            seen = np.zeros(h.occurrences + k, bool)
            seen[found + k] = True  # shifted: found may hold j's below 0
            start = start[seen[start + k]]
        if not len(start):
            return mask
    assert start is not None
    first = file.first()
    answer = np.searchsorted(first, start, side="right") - 1
    keep = (answer >= 0) & (answer < h.answers)
    start, answer = start[keep], answer[keep]
    keep = start + k <= first[answer + 1]  # every word in the same answer
    start, answer = start[keep], answer[keep]
    # the separator after word ordinal x of answer a is seps[x + a + 1]; before it, seps[x + a]
    checks: list[tuple[int, Callable[[bytes], bool]]] = [
        (i + 1, sep.__eq__) for i, sep in enumerate(p.between)
    ]
    if p.lead is not None:
        checks.append((0, _ends(p.lead)))
    if p.trail is not None:
        checks.append((k, _starts(p.trail)))
    names: list[bytes] | None = None
    for shift, test in checks:
        if not len(start):
            break
        names = file.separators() if names is None else names
        ok = np.flatnonzero(np.fromiter(map(test, names), bool, len(names)))
        hit = np.isin(file.seps_at(start + answer + shift), ok)
        start, answer = start[hit], answer[hit]
    mask[answer] = True
    return mask


def _ends(tail: bytes) -> Callable[[bytes], bool]:
    return lambda s: s.endswith(tail)


def _starts(head: bytes) -> Callable[[bytes], bool]:
    return lambda s: s.startswith(head)


def _count(file: PositionsFile, ids: np.ndarray) -> int:
    """How many positions these word ids have (from pos_ends: few reads; many ids, as for a
    suffix, count as all)."""
    if len(ids) > 64 or not len(ids):
        return file.header.occurrences
    if ids[-1] - ids[0] + 1 == len(ids):  # consecutive: one read
        bounds = file.read("pos_ends", max(int(ids[0]) - 1, 0), int(ids[-1]) + 1)
        return int(bounds[-1]) - (int(bounds[0]) if ids[0] > 0 else 0)
    return file.header.occurrences


def word_mask(file: PositionsFile, condition: str, piece: str) -> np.ndarray:
    """Which of the step's answers hold a word meeting one piece's condition (the text index's
    SQL condition, :data:`~gmts_core.run_dataset.postings.NEEDLES`): the words searched, then
    the matched words' answer rows read."""
    chunk = file.words_chunk()
    before, after = NEEDLES[condition]
    found = hits(chunk.words, before + piece.encode() + after)
    mask = np.zeros(file.header.answers, bool)
    if not len(found) or not len(chunk.starts):
        return mask
    ids = np.searchsorted(chunk.starts, found + len(before), side="right") - 1
    ids = np.unique(ids[(ids >= 0) & (ids < len(chunk.starts))])
    mask[file.rows_of(ids)] = True
    return mask
