"""The answers' word index: a text search that does not read every answer's text.

``gmts analyze-run`` writes, per step, ``words/step_NNNNN.parquet``: one row per distinct word
of the step's answers, sorted by word, with the rows (in the step's answers file) of the
answers that hold it. A *word* is a maximal run of ``[0-9a-z_]`` in the lower-cased text
(other characters, non-ASCII letters included, separate words). Built with pyarrow compute
(RE2 split, dictionary encoding, one numpy sort), so writing it keeps pace with the analysis.

A search for ``q`` (case-insensitive, literal: ``contains(lower(text), lower(q))``, where
``lower`` is :func:`lower_texts` on the texts and on ``q``, in the index and in every scan alike)
becomes,
per word piece of ``q`` (its maximal ``[0-9a-z_]`` runs), a condition on the words:

- a piece with a separator on both sides inside ``q`` is a whole word of the text: ``word = p``;
- a piece at the start of ``q`` (only a separator after it) ends a word: ``suffix(word, p)``;
- at the end of ``q`` it starts one: ``prefix(word, p)``;
- a ``q`` that is one piece and nothing else lies inside one word: ``contains(word, p)``.

An answer that holds ``q`` holds a word meeting each piece's condition, so the answers whose
words meet all of them are a superset of the matches, read from the index alone. For a ``q``
of one piece that superset is exact; otherwise the candidates' texts are checked (only theirs).
A ``q`` with no word character (``"+ "``), or a dataset written before the index (or with a
step missing its words file), is searched by reading the texts, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gmts_core.errors import InvalidInputError

WORD = re.compile(r"[0-9a-z_]+")
SEPARATORS = r"[^0-9a-z_]+"
MAX_PIECES = 16
SQL_LOWER = "gmts_lower"  # :func:`lower_texts` in a query's SQL (reading.connect registers it)


def lower_texts(texts: pa.Array) -> pa.Array:
    """``texts`` lower-cased: the search's one case rule (Arrow's ``utf8_lower``), for the
    index's words and separators, a search's query (:func:`lower`) and every scan of the texts
    (the SQL ones through :data:`SQL_LOWER`). Not DuckDB's ``lower``, whose case table differs
    (DuckDB 2.0: 75 code points, "\ua7cb" -> itself where Arrow gives "\u0264"), nor Python's
    ``str.lower`` ("İ" -> "i" and a combining dot, a separator here)."""
    return pc.utf8_lower(texts)


def lower(query: str) -> str:
    """``query`` lower-cased as the texts are (:func:`lower_texts`); InvalidInputError where it
    is not valid Unicode (a lone surrogate, which JSON can carry)."""
    try:
        text = pa.array([query], pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        raise InvalidInputError("a search text holds a lone surrogate (not Unicode)") from None
    return str(lower_texts(text)[0].as_py())


def word_table(step: int, texts: pa.Array | list[str]) -> pa.Table:
    """The step's word index: ``step``, ``word`` and ``answers`` (ascending answer rows)."""
    vocab, offsets, rows = word_postings(texts)
    return pa.table(
        {
            "step": pa.array(np.full(len(vocab), step, dtype=np.int32)),
            "word": vocab,
            "answers": pa.ListArray.from_arrays(
                pa.array(offsets.astype(np.int32)), pa.array(rows.astype(np.int32))
            ),
        }
    )


def word_postings(texts: pa.Array | list[str]) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The distinct words of ``texts`` (sorted), and each word's answer rows: ``rows[offsets[i]
    : offsets[i + 1]]``, ascending, for word ``i``."""
    vocab, rank, parent, m = split_words(texts)[1:]
    codes = rank * max(m, 1) + parent
    codes = np.sort(codes)  # unique pairs: sorted, repeats dropped (faster than np.unique)
    codes = codes[np.r_[True, codes[1:] != codes[:-1]]] if len(codes) else codes
    word_rank, rows = np.divmod(codes, max(m, 1))
    starts = (  # no word in any answer: no row (np.r_[True] would name a first one)
        np.flatnonzero(np.r_[True, word_rank[1:] != word_rank[:-1]])
        if len(codes)
        else np.zeros(0, np.int64)
    )
    offsets = np.r_[starts, len(codes)].astype(np.int64)
    return vocab, offsets, rows


def split_words(
    texts: pa.Array | list[str],
) -> tuple[pa.Array, pa.Array, np.ndarray, np.ndarray, int]:
    """``texts`` lower-cased, their distinct words (sorted), and per word occurrence, in text
    order (answer by answer): its word's rank in that list and its answer's row; the answers'
    count."""
    arr = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    lowered = lower_texts(arr.fill_null(""))
    words = pc.split_pattern_regex(lowered, SEPARATORS)
    flat = pc.list_flatten(words)
    parent = pc.list_parent_indices(words)
    keep = pc.greater(pc.binary_length(flat), 0)
    flat, parent = flat.filter(keep), parent.filter(keep)
    encoded = flat.dictionary_encode()
    vocab = encoded.dictionary
    order = pc.sort_indices(vocab).to_numpy()
    rank = np.empty(len(vocab), dtype=np.int64)
    rank[order] = np.arange(len(vocab), dtype=np.int64)
    occurrences = rank[encoded.indices.to_numpy()]
    rows = parent.to_numpy().astype(np.int64)
    return lowered, vocab.take(pa.array(order)), occurrences, rows, len(arr)


@dataclass(frozen=True)
class WordPlan:
    """How the index answers a search: one SQL condition per piece (its parameters in
    order), and whether the candidates are the matches (no text check needed)."""

    conditions: tuple[str, ...]
    params: tuple[str, ...]
    exact: bool


def plan(query: str) -> WordPlan | None:
    """The index's plan for a search of ``query``; None when the index cannot narrow it (no
    word character in it)."""
    lowered = lower(query)
    pieces = list(WORD.finditer(lowered))
    if not pieces:
        return None
    exact = len(pieces) == 1 and pieces[0].group() == lowered
    pieces = pieces[:MAX_PIECES]  # fewer conditions: still a superset, the texts checked
    conditions: list[str] = []
    params: list[str] = []
    for found in pieces:
        open_left = found.start() == 0
        open_right = found.end() == len(lowered)
        piece = found.group()
        if open_left and open_right:
            conditions.append("contains(word, ?)")
        elif open_left:
            conditions.append("suffix(word, ?)")
        elif open_right:
            conditions.append("prefix(word, ?)")
        else:
            conditions.append("word = ?")
        params.append(piece)
    return WordPlan(tuple(conditions), tuple(params), exact)


def candidates_sql(p: WordPlan) -> str:
    """SQL of the answers (``c_step``, ``c_row``) whose words meet every condition of ``p``:
    the index's files are the parameter ``$words``, the pieces ``$w0``, ``$w1``...
    (:func:`named`)."""
    conds = [c.replace("?", f"$w{i}") for i, c in enumerate(p.conditions)]
    mask = " | ".join(f"(CASE WHEN {c} THEN {1 << i} ELSE 0 END)" for i, c in enumerate(conds))
    full = (1 << len(conds)) - 1
    return f"""SELECT c_step, c_row FROM (
                 SELECT step AS c_step, unnest(answers) AS c_row, {mask} AS mask
                 FROM read_parquet($words) WHERE {" OR ".join(conds)})
               GROUP BY c_step, c_row HAVING bit_or(mask) = {full}"""


def named(p: WordPlan) -> dict[str, str]:
    """The pieces of ``p`` as the named parameters of :func:`candidates_sql`."""
    return {f"w{i}": piece for i, piece in enumerate(p.params)}
