"""The answers' word index: a search through it (its positions, or its earlier forms in a
dataset written before them: postings, words) finds exactly what reading every text finds, on
realistic texts, in the same order, and a dataset without it is still searched (by reading the
texts)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset import AnalysedRun, write_step
from gmts_core.run_dataset.postings import postings_table
from gmts_core.run_dataset.realistic import (
    MAX_LENGTH,
    ZERO_SIGNAL_SHARE,
    lognormal_lengths,
    realistic_step,
    vocabulary,
)
from gmts_core.run_dataset.schema import step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.text_index import plan, word_table
from gmts_core.run_dataset.writer import positions_file


def _earlier_forms(root: Path, with_index: Path, steps: int) -> tuple[Path, Path, Path]:
    """Copies of ``with_index`` (its positions dropped): without a word index, with its first
    form only (words/, as datasets written before the postings have it) and with its second
    form only (postings/, as datasets written before positions)."""
    without = root / "old"
    shutil.copytree(with_index, without)
    shutil.rmtree(without / "positions")
    first, second = root / "first-form", root / "second-form"
    shutil.copytree(without, first)
    shutil.copytree(without, second)
    for step in range(1, steps + 1):
        answers = pq.read_table(step_file(first, "answers", step), columns=["text"])
        step_file(first, "words", step).parent.mkdir(exist_ok=True)
        pq.write_table(word_table(step, answers["text"]), step_file(first, "words", step))
        step_file(second, "postings", step).parent.mkdir(exist_ok=True)
        pq.write_table(
            postings_table(step, answers["text"]),
            step_file(second, "postings", step),
            compression="none",
            use_dictionary=False,
        )
    return without, first, second


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str], Path, Path]:
    """The same realistic run with its word index, (a copy) without it, (a copy) with the
    index's first form only and (a copy) with its second form only (:func:`_earlier_forms`)."""
    root = tmp_path_factory.mktemp("realistic")
    with_index = root / "indexed"
    write_manifest(with_index, ("entropy", "gmts"), {})
    rng, vocab = np.random.default_rng(5), vocabulary(size=3000)
    texts: list[str] = []
    for step in (1, 2, 3):
        cols = realistic_step(step, 12, 4, rng, vocab)
        texts += cols.answer_text.to_pylist()  # type: ignore[union-attr]
        write_step(with_index, cols)
    without, first, second = _earlier_forms(root, with_index, 3)
    return with_index, without, texts, first, second


QUERIES = [
    "the",  # one piece: inside a word, exact from the index
    "THE",
    "an",
    " of the",  # a whole word, then a word's start
    "er ",  # a word's end
    ", and",
    "9",
    "zzzzq",  # in no answer
    "+ ",  # no word character: the texts are read
    "%",
]


@pytest.mark.parametrize("query", QUERIES)
def test_an_indexed_search_equals_reading_every_text(runs, query: str) -> None:
    indexed, old, texts, first, second = runs
    want = sum(query.lower() in t.lower() for t in texts)
    for root in (indexed, old, second):
        run = AnalysedRun(root)
        rows, total = run.ranked_answers("length", limit=1000, contains=query)
        assert total == want == len(rows)
        assert all(query.lower() in r["text"].lower() for r in rows)
        assert run.count_answers(contains=query) == want
        page, _ = run.ranked_answers("reward", limit=3, offset=2, contains=query, zero_signal=True)
        full, _ = run.ranked_answers("reward", limit=1000, contains=query, zero_signal=True)
        assert page == full[2:5]


@pytest.mark.parametrize(
    "query, by, descending",
    [("the", "entropy_mean", False), (" of the", "abs_advantage", True), ("+ ", "length", True)],
)
def test_every_index_form_gives_the_scans_page_in_its_order(runs, query, by, descending) -> None:
    indexed, old, _, first, second = runs
    pages = [
        AnalysedRun(r).ranked_answers(by, descending, limit=7, offset=1, contains=query)
        for r in (indexed, old, first, second)
    ]
    assert pages[0] == pages[1] == pages[2] == pages[3] and len(pages[0][0]) == 7


# answers whose case mapping is hostile: code points DuckDB's lower leaves as they are and
# Arrow's utf8_lower maps ("\ua7cb" -> "\u0264", "\U00010d50" -> "\U00010d70"), ones that
# lower-case to ASCII ("İ", the Kelvin sign), sigma, ß, a title-case digraph, combining marks,
# NUL, no text, and a phrase of more runs than the positions index answers (MAX_RUNS)
HOSTILE: list[list[str | None]] = [
    ["a\ua7cb b", "A\u0264 B", "\u0130the end", "x \U00010d50y", "the " * 150, None, ""],
    ["\x00the\x00", "the_end", "\u01c5 \u00df \u1e9e", "a\ua7cb", "k K \u212a",
     "\u03a3\u0391 \u03c2", "e\u0301 \u00c9"],
]  # fmt: skip
HOSTILE_QUERIES = ["a\u0264", "A\ua7cb B", "\u0264 b", "\U00010d70y", "\u0130the", "the " * 130,
                   "the " * 130 + "x", "k", "\u212a", "\u03c3\u03b1 ", "\u00df", "\u1e9e",
                   "\x00the", "the\x00", "_end", "\u01c6", "e\u0301", "\u00e9", " "]  # fmt: skip


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The :data:`HOSTILE` answers written by ``write_step`` (with positions), and its copies
    with an earlier form of the index or none (:func:`_earlier_forms`)."""
    root = tmp_path_factory.mktemp("hostile")
    with_index = root / "indexed"
    write_manifest(with_index, ("entropy", "gmts"), {})
    rng = np.random.default_rng(7)
    for step, texts in enumerate(HOSTILE, 1):
        cols = synthetic_step(step, len(texts), 1, rng, median_length=2)
        write_step(with_index, replace(cols, answer_text=pa.array(texts, pa.string())))
    return [with_index, *_earlier_forms(root, with_index, len(HOSTILE))]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_every_form_and_the_scan_lower_case_alike_on_hostile_texts(hostile, query) -> None:
    """Each form of the index, and the scan, finds the answers whose text lower-cased holds the
    query lower-cased, both by Arrow's utf8_lower (the index's rule): DuckDB's lower in the
    scan missed "a\ua7cb" for "a\u0264"; a phrase longer than MAX_RUNS took its first word's
    answers from the positions index unchecked."""

    def low(s: str) -> str:
        return str(pc.utf8_lower(pa.scalar(s, pa.string())).as_py())

    texts = [t for step in HOSTILE for t in step]
    want = sum(t is not None and low(query) in low(t) for t in texts)
    pages = [AnalysedRun(r).ranked_answers("length", limit=1000, contains=query) for r in hostile]
    assert pages[0][1] == want == len(pages[0][0]), (query, [p[1] for p in pages])
    assert pages[1:] == pages[:-1], query


def test_a_search_that_is_not_valid_unicode_is_refused_by_every_form(hostile) -> None:
    for root in hostile:
        for query in ("a\ud800", "+\udfff"):  # a lone surrogate (JSON carries one)
            with pytest.raises(InvalidInputError, match="lone surrogate"):
                AnalysedRun(root).ranked_answers("length", contains=query)


def test_the_plan_of_a_search_reads_its_pieces_as_word_conditions() -> None:
    assert plan("+ ") is None
    one = plan("Sum")
    assert one is not None and one.exact and one.conditions == ("contains(word, ?)",)
    many = plan("x of y")
    assert many is not None and not many.exact
    assert many.conditions == ("suffix(word, ?)", "word = ?", "prefix(word, ?)")
    assert many.params == ("x", "of", "y")


def test_a_step_without_its_words_file_searches_by_reading_the_texts(runs, tmp_path) -> None:
    indexed, _, texts, _, _ = runs
    partial = tmp_path / "partial"
    shutil.copytree(indexed, partial)
    positions_file(partial, 2).unlink()
    rows, total = AnalysedRun(partial).ranked_answers("length", limit=1000, contains=" the")
    assert total == sum(" the" in t.lower() for t in texts) == len(rows)


def test_realistic_texts_have_the_stated_lengths_vocabulary_and_zero_signal(runs) -> None:
    lengths = lognormal_lengths(np.random.default_rng(0), 200_000)
    assert 150 <= np.median(lengths) <= 162 and 226 <= lengths.mean() <= 246
    assert lengths.max() == MAX_LENGTH
    vocab = vocabulary()
    assert len(vocab) == len(set(vocab.to_pylist())) == 30_000
    cols = realistic_step(1, 400, 8, np.random.default_rng(1), vocab)
    assert "".join(cols.text.to_pylist()[: cols.length[0]]) == cols.answer_text[0].as_py()
    groups = cols.reward.reshape(400, 8)
    zero = (groups.min(axis=1) == groups.max(axis=1)).mean()
    assert abs(zero - ZERO_SIGNAL_SHARE) < 0.01
    indexed, _, _, _, _ = runs
    assert positions_file(indexed, 1).stat().st_size > 400


def test_a_foreign_index_is_refused_or_ignored_never_trusted(runs, tmp_path) -> None:
    import json

    indexed, _, _, first, second = runs
    bad = tmp_path / "bad"
    shutil.copytree(first, bad)
    words = pa.table({"step": pa.array([1], pa.int32()), "word": ["the"], "answers": ["0,1"]})
    pq.write_table(words, step_file(bad, "words", 1))
    with pytest.raises(InvalidInputError, match="words/step_00001.parquet: column 'answers'"):
        AnalysedRun(bad).ranked_answers("reward", contains="the")
    bad = tmp_path / "bad-postings"
    shutil.copytree(second, bad)
    good = pq.read_table(step_file(bad, "postings", 1)).to_pylist()[0]
    forged = [
        {"rows": (60000).to_bytes(2, "little") * (len(good["rows"]) // 2)},  # past the answers
        {"ends": (10**9).to_bytes(4, "little") * (len(good["ends"]) // 4)},  # past the rows
        {"ends": good["ends"][:-4]},  # fewer ends than words
        {"answers": 5},  # not its step's answers
    ]
    for change in forged:
        table = pa.table(
            {k: [v] for k, v in {**good, **change}.items()},
            schema=pq.read_schema(step_file(second, "postings", 1)),
        )
        pq.write_table(table, step_file(bad, "postings", 1))
        with pytest.raises(InvalidInputError, match="postings/step_00001.parquet"):
            AnalysedRun(bad).ranked_answers("reward", contains="the")
    lines = (bad / "steps.jsonl").read_text().splitlines()
    forged = json.loads(lines[0])
    forged["row"]["num_answers"] = -5  # a line with the file's key but a value out of range
    (bad / "steps.jsonl").write_text(json.dumps(forged) + "\n" + "[1, 2]\n")
    assert AnalysedRun(bad).steps() == AnalysedRun(indexed).steps()  # read from the files


def test_answers_without_a_word_index_no_word() -> None:
    """Empty or punctuation-only answers (a dump's ids with no tokenizer) give an empty index."""
    from gmts_core.run_dataset.text_index import word_table

    assert word_table(1, ["", "!!", " "]).num_rows == 0
    assert word_table(1, ["", "Yes"])["word"].to_pylist() == ["yes"]
