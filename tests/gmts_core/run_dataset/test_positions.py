"""The word index's positions (third form): a phrase answered from the index gives exactly the
answers a plain scan of the texts gives (generated texts with punctuation, repeated words, case
and non-ASCII characters), and a forged positions file is refused by name, never read past."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset import AnalysedRun, write_step
from gmts_core.run_dataset.positions import (
    HEADER,
    SECTIONS,
    TABLE,
    PositionsFile,
    phrase,
    phrase_mask,
    positions_bytes,
    word_mask,
)
from gmts_core.run_dataset.schema import write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.text_index import plan
from gmts_core.run_dataset.writer import positions_file

# words that repeat and share prefixes and suffixes, separators of every kind, case, non-ASCII
# letters (two lower-case to ASCII: the Kelvin sign and "İ"; some lower-case to more or fewer
# UTF-8 bytes: "Ⱥ", "ẞ"; a title-case digraph; a letter only newer case tables map), digits of
# another script, a combining mark, NUL, a long word, and underscores
PIECES = ["the", "The", "THE", "then", "other", "of", "total", "subtotal", "a", "x_1", "42", "é",
          "Σ", "\u212a", "ß", "İ", " ", "  ", ", ", ".", "\n", "-", "😀", "'", "", "_", "Ⱥ", "ẞ",
          "ǅ", "ς", "ı", "\ua7cb", "\u0264", "٣", "\u0307", "\x00", "x" * 40]  # fmt: skip


def _lower(s: str) -> str:
    return str(pc.utf8_lower(pa.scalar(s, pa.string())).as_py())


def _scan(texts: list[str], query: str) -> np.ndarray:
    q = _lower(query)
    return np.array([q in _lower(t) for t in texts], bool)


def _indexed(path: Path, texts: list[str], query: str) -> np.ndarray | None:
    words = plan(query)
    if words is None:
        return None  # no word character: the texts are read (not the index's case)
    fd = os.open(path, os.O_RDONLY)
    try:
        file = PositionsFile(fd, "t.idx", len(texts))
        p = phrase(query)
        if p is None and not words.exact:
            return None  # more than MAX_RUNS runs: candidates, their texts checked
        if p is None:
            return word_mask(file, words.conditions[0], words.params[0])
        return phrase_mask(file, p)
    finally:
        os.close(fd)


texts_st = st.lists(
    st.lists(st.sampled_from(PIECES), max_size=14).map("".join), min_size=1, max_size=8
)


@settings(max_examples=120, deadline=None)
@given(texts=texts_st, data=st.data())
def test_a_search_on_the_positions_equals_a_scan_of_the_texts(tmp_path_factory, texts, data):
    path = tmp_path_factory.mktemp("pos") / "step.idx"
    path.write_bytes(positions_bytes(1, texts))
    source = data.draw(st.sampled_from(texts))
    lo = data.draw(st.integers(0, len(source)))
    hi = data.draw(st.integers(lo, len(source)))
    invented = data.draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=5).map("".join))
    for query in (source[lo:hi], source[lo:hi].upper(), invented):
        if not query:
            continue
        got = _indexed(path, texts, query)
        if got is not None:
            assert got.tolist() == _scan(texts, query).tolist(), (texts, query)


def test_phrases_across_answers_and_at_their_edges_are_exact(tmp_path) -> None:
    texts = ["total of", "the end", "The total of the sum, then", ", the", "of the", "x"]
    path = tmp_path / "s.idx"
    path.write_bytes(positions_bytes(1, texts))
    for query in ("of the", "total of the", "of\nthe", ", the", "sum, ", " of ", "f t", "e e"):
        got = _indexed(path, texts, query)
        assert got is not None and got.tolist() == _scan(texts, query).tolist(), query
    assert phrase("the") is None and phrase("+ ") is None  # one word: rows; none: texts
    # the query is lower-cased as the texts are (Arrow: "İ" -> "i"; Python's str.lower would
    # add a combining dot, a separator, and miss "İthe")
    dotted = ["İthe", "x İ y", "\u212a", "x ΣΑ"]
    path.write_bytes(positions_bytes(1, dotted))
    for query in ("İ", "İT", "İthe", "x İ", "İ y", "k", "\u212a", "x σ"):
        got = _indexed(path, dotted, query)
        assert got is not None and got.tolist() == _scan(dotted, query).tolist(), query
    p = phrase("Sum, THE e")
    assert p is not None and p.words == (("suffix", "sum"), ("word", "the"), ("prefix", "e"))
    assert p.between == (b", ", b" ") and p.lead is None and p.trail is None


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("positions") / "run"
    write_manifest(root, ("entropy", "gmts"), {})
    rng = np.random.default_rng(3)
    for step in (1, 2):
        write_step(root, synthetic_step(step, 6, 4, rng, median_length=12))
    return root


def _forge(data: bytes, section: str, value: bytes) -> bytes:
    """``data`` with the start of one section overwritten by ``value``."""
    table = TABLE.unpack(data[HEADER.size : HEADER.size + TABLE.size])
    at = table[2 * SECTIONS.index(section)]
    return data[:at] + value + data[at + len(value) :]


def _header(data: bytes, field: int, value: int) -> bytes:
    at = 8 + 8 * field
    return data[:at] + struct.pack("<q", value) + data[at + 8 :]


def _table(data: bytes, section: str, offset: int) -> bytes:
    at = HEADER.size + 16 * SECTIONS.index(section)
    return data[:at] + struct.pack("<q", offset) + data[at + 8 :]


def test_a_forged_positions_file_is_refused_by_name(run: Path, tmp_path: Path) -> None:
    good = positions_file(run, 1).read_bytes()
    big = struct.pack("<i", 10**9) * 64
    forged = {
        "garbage": b"\x00" * 200,
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "other answers": _header(good, 1, 7),
        "negative counts": _header(good, 2, -5),
        "section outside": _table(good, "positions", len(good) + 10),
        "positions past the words": _forge(good, "positions", big),
        "postings past the rows": _forge(good, "pos_ends", big),
        "rows past the answers": _forge(good, "row_ends", big),
        "separator ids past the list": _forge(good, "seps", b"\xff\xff" * 512),
        "answers' words out of order": _forge(good, "first", big),
    }
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    checked_in_header = list(forged)[:6]
    for name, data in forged.items():
        positions_file(bad, 1).write_bytes(data)
        refused = 0
        for query in ("a b", "a", ", a", "e", "a a"):  # a word's rows, phrases, separators
            try:
                AnalysedRun(bad).ranked_answers("reward", contains=query)
            except InvalidInputError as exc:  # never another error, never a read outside
                assert "positions/step_00001.idx" in str(exc), (name, query, exc)
                refused += 1
        if name in checked_in_header:
            assert refused == 5, name
