"""The analysed-run dataset: its folder layout, its Parquet schemas and their version.

An analysed run (``gmts analyze-run -o OUT``) is a dataset of three tables, one Parquet file
per step each, so a reader opens only the steps it needs and a growing run adds files without
touching the old ones::

    OUT/dataset.json                 {"format": "gmts-analysed-run", "version": 1, "methods": ...}
    OUT/tokens/step_NNNNN.parquet    one row per answer token, sorted by (group, answer, position)
    OUT/answers/step_NNNNN.parquet   one row per answer, sorted by (group, answer)
    OUT/steps/step_NNNNN.parquet     one row: the step's summary numbers (the charts' source)
    OUT/top/step_NNNNN.parquet       the step's TOP_K tokens by each of TOP_ORDERS
    OUT/positions/step_NNNNN.idx     the answers' word index (text search; positions.py)
    OUT/postings/step_NNNNN.parquet  its second form, in datasets written before it
    OUT/words/step_NNNNN.parquet     its first form

Precision: every statistic is float32. float16 keeps 3 significant digits, too few to rank
tokens whose γ differ in the fourth digit (a selection's cut is often there), while float32 is
what the analysis computes in; ranks are stored exactly as int32. Token texts are dictionary
encoded (a vocabulary repeats), and every file is zstd-compressed. Rows are sorted, with row
groups of :data:`ROW_GROUP_ROWS` rows, so a filter on (group, answer) reads only the row
groups whose min/max statistics admit it.

Columns per method ``m`` (one of the analysis's methods): ``selected_m`` (bool) in the tokens
table, ``selected_count_m`` in the answers table, ``coverage_m`` / ``wasted_m`` in the steps
table. The ``top`` table makes a ranking of the whole run's tokens exact and cheap: the run's
k highest (k <= TOP_K) are among the union of every step's k highest, so a ranking reads
TOP_K rows a step instead of every token. :func:`check_manifest` refuses a dataset of another
format or a newer version.
"""

from __future__ import annotations

import json
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset.folder import DatasetFolder

FORMAT = "gmts-analysed-run"
VERSION = 1
MANIFEST = "dataset.json"
TABLES = ("tokens", "answers", "steps", "top")  # the Parquet tables the writer writes
# the word index (positions/step_NNNNN.idx: gmts_core.run_dataset.positions), and its earlier
# forms (read, not written)
INDEXES = ("positions", "postings", "words")
TOP_K = 1000
# order key -> what it ranks by (highest first); rank_gap: how far apart the entropy and the
# gamma rankings put a token (the tokens the two criteria disagree on most)
TOP_ORDERS: dict[str, str] = {
    "gamma": "gamma",
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "rank_gap": "abs(entropy_rank - gamma_rank)",
}
ROW_GROUP_ROWS = 131_072
ANSWER_GROUPS = 512  # an answers file's row groups, at least 1,024 rows each: a page reads few
COMPRESSION = "zstd"

# name -> (arrow type, meaning); the method columns are added per dataset
TOKEN_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "step": (pa.int32(), "the run's step number"),
    "group": (pa.int32(), "the group's index within the step"),
    "answer": (pa.int32(), "the answer's index within its group"),
    "position": (pa.int32(), "the token's position within the answer (0 = first)"),
    "token_id": (pa.int64(), "the token's id in the model's vocabulary"),
    "text": (pa.dictionary(pa.int32(), pa.string()), "the token's text"),
    "reward": (pa.float32(), "the answer's reward r_i"),
    "advantage": (pa.float32(), "the answer's advantage A_i"),
    "weight": (pa.float32(), "the answer's loss-aggregation weight w_i"),
    "logprob": (pa.float32(), "log pi(y_t), nats"),
    "entropy": (pa.float32(), "Shannon entropy of the next-token distribution, nats"),
    "grad_norm": (pa.float32(), "g = ||d log pi(y_t) / d z_t||, exact"),
    "gamma": (pa.float32(), "gamma = w_i |omega_t| g, the exact norm of the loss gradient"),
    "entropy_rank": (pa.int32(), "rank by entropy within the step (1 = highest)"),
    "gamma_rank": (pa.int32(), "rank by gamma within the step (1 = highest)"),
}
ANSWER_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "step": (pa.int32(), "the run's step number"),
    "group": (pa.int32(), "the group's index within the step"),
    "answer": (pa.int32(), "the answer's index within its group"),
    "prompt_key": (pa.uint64(), "a hash of the prompt's text: the same prompt across steps"),
    "prompt": (pa.dictionary(pa.int32(), pa.string()), "the prompt's text"),
    "text": (pa.string(), "the answer's text"),
    "reward": (pa.float32(), "r_i"),
    "advantage": (pa.float32(), "A_i"),
    "length": (pa.int32(), "answer tokens"),
    "zero_signal": (pa.bool_(), "every answer of the group has the same reward (A = 0)"),
    "entropy_mean": (pa.float32(), "mean entropy over the answer's tokens, nats"),
    "gamma_sum": (pa.float32(), "sum of gamma over the answer's tokens"),
    "disagreement": (
        pa.int32(),
        "tokens one of the compared pair (compared_pair: entropy and gmts where both were "
        "run) selects and the other does not",
    ),
    "first_row": (pa.int64(), "row of the answer's first token in the step's tokens file"),
}
STEP_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "step": (pa.int32(), "the run's step number"),
    "num_groups": (pa.int32(), "groups"),
    "num_answers": (pa.int32(), "answers"),
    "num_tokens": (pa.int64(), "answer tokens"),
    "reward_mean": (pa.float32(), "mean reward over the step's answers"),
    "entropy_mean": (pa.float32(), "mean entropy over the step's tokens, nats"),
    "zero_signal_share": (pa.float32(), "share of groups whose rewards are all equal"),
    "overlap": (pa.float32(), "Jaccard index of the compared pair's selections"),
}

# Optional columns (written since issue 45, read where present; a dataset without them, or a
# run whose dump logs no per-token numbers, simply lacks them, and the footer check asks only
# for the columns above). Tokens: ``trained`` always; ``logged_<name>`` for each per-token
# number the trainer's dump logged (gmts_core.runs.token_samples.TOKEN_COLUMNS: entropy,
# trainer_logprob, inference_logprob, advantage, importance_ratio, mismatch_kl; miles'
# rollout_log_probs), and ``logprob_diff`` where the dump logs the inference side. Steps: the
# train/inference mismatch (gmts_core.runs.logged_tokens.mismatch_summary), per method
# ``mismatch_selected_share_<m>``.
OPTIONAL_TOKEN_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "trained": (pa.bool_(), "the trainer's loss counted the token (its loss mask is 1)"),
    "logged_<name>": (pa.float32(), "the number <name> the trainer's dump logged for it"),
    "logprob_diff": (
        pa.float32(),
        "log pi_trainer - log pi_inference, nats (trainer side: the logged one, else logprob)",
    ),
}
OPTIONAL_STEP_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "untrained_tokens": (pa.int64(), "answer tokens the trainer did not train (loss mask 0)"),
    "mismatch_threshold": (pa.float32(), "|logprob_diff| above it is high-mismatch, nats"),
    "mismatch_share_above": (pa.float32(), "share of trained tokens above the threshold"),
    "mismatch_mean_abs": (pa.float32(), "mean |logprob_diff| over trained tokens, nats"),
    "mismatch_selected_share_<m>": (
        pa.float32(),
        "share of the tokens method <m> selects whose |logprob_diff| is above the threshold",
    ),
}


TOP_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "order_key": (pa.dictionary(pa.int8(), pa.string()), "which ranking the row belongs to"),
    "score": (pa.float64(), "the value it is ranked by"),
    **{k: v for k, v in TOKEN_COLUMNS.items()},
}


# the answers' word index (gmts_core.run_dataset.text_index), written since it was added:
# a dataset without it is searched by reading the texts
WORD_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "step": (pa.int32(), "the run's step number"),
    "word": (pa.string(), "a run of [0-9a-z_] in an answer's lower-cased text"),
    "answers": (pa.list_(pa.int32()), "rows of the answers file whose text holds the word"),
}
POSTINGS_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "step": (pa.int32(), "the run's step number"),
    "answers": (pa.int32(), "rows of the step's answers file"),
    "row_bytes": (pa.int32(), "bytes of one entry of rows: 2 or 4"),
    "words": (pa.binary(), "the chunk's words, each after a newline, a newline last"),
    "starts": (pa.binary(), "int32 LE: where each word begins in words"),
    "ends": (pa.binary(), "int32 LE: where each word's postings end in rows"),
    "rows": (pa.binary(), "answer rows holding each word, ascending per word"),
}

COMPARED = ("entropy", "gmts")  # the pair the tool is about: the 80/20 rule against GMTS


def compared_pair(methods: tuple[str, ...]) -> tuple[str, str] | None:
    """The two methods whose disagreement and overlap a dataset stores: entropy and gmts
    where both were run, else the first two; None with fewer than two."""
    if all(m in methods for m in COMPARED):
        return COMPARED
    return (methods[0], methods[1]) if len(methods) > 1 else None


def method_columns(methods: tuple[str, ...]) -> dict[str, dict[str, tuple[pa.DataType, str]]]:
    """The per-method columns of each table."""
    return {
        "tokens": {f"selected_{m}": (pa.bool_(), f"{m} selects the token") for m in methods},
        "top": {f"selected_{m}": (pa.bool_(), f"{m} selects the token") for m in methods},
        "words": {},
        "postings": {},
        "answers": {f"selected_count_{m}": (pa.int32(), f"tokens {m} selects") for m in methods},
        "steps": {
            **{f"coverage_{m}": (pa.float32(), f"share of sum gamma {m} keeps") for m in methods},
            **{
                f"wasted_{m}": (pa.float32(), f"share of {m}'s picks with gamma = 0")
                for m in methods
            },
        },
    }


def schema(table: str, methods: tuple[str, ...]) -> pa.Schema:
    """The Arrow schema of ``table`` ("tokens", "answers" or "steps") for these methods."""
    base = {
        "tokens": TOKEN_COLUMNS,
        "answers": ANSWER_COLUMNS,
        "steps": STEP_COLUMNS,
        "top": TOP_COLUMNS,
        "words": WORD_COLUMNS,
        "postings": POSTINGS_COLUMNS,
    }[table]
    cols = {**base, **method_columns(methods)[table]}
    return pa.schema(
        [pa.field(name, typ, metadata={"doc": doc}) for name, (typ, doc) in cols.items()],
        metadata={"format": FORMAT, "version": str(VERSION)},
    )


def step_file(root: Path, table: str, step: int) -> Path:
    return root / table / f"step_{step:05d}.parquet"


@dataclass(frozen=True)
class Manifest:
    """What ``dataset.json`` says: the format's version and how the run was analysed."""

    version: int
    methods: tuple[str, ...]
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "methods": list(self.methods),
            "settings": self.settings,
            "tables": {t: schema_doc(t, self.methods) for t in TABLES},
            "optional_columns": {
                "tokens": {k: f"{t}: {d}" for k, (t, d) in OPTIONAL_TOKEN_COLUMNS.items()},
                "steps": {k: f"{t}: {d}" for k, (t, d) in OPTIONAL_STEP_COLUMNS.items()},
            },
        }


def schema_doc(table: str, methods: tuple[str, ...]) -> dict[str, str]:
    return {f.name: f"{f.type}: {f.metadata[b'doc'].decode()}" for f in schema(table, methods)}


def write_manifest(root: Path, methods: tuple[str, ...], settings: dict[str, Any]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    text = json.dumps(Manifest(VERSION, methods, settings).to_dict(), indent=1)
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(root / MANIFEST)


MAX_MANIFEST_BYTES = 1 << 20
MAX_METHODS = 32
# a method's name becomes part of a column name (``selected_<m>``): a strict pattern, and the
# queries quote every column name as an identifier as well
METHOD_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")


def is_dataset(root: Path) -> bool:
    """``root`` holds a manifest file and a steps folder (neither a link: not followed)."""
    try:
        manifest = (root / MANIFEST).lstat()
        steps = (root / "steps").lstat()
    except OSError:
        return False
    return stat.S_ISREG(manifest.st_mode) and stat.S_ISDIR(steps.st_mode)


def parse_manifest(data: bytes, where: str) -> Manifest:
    """The manifest in ``data`` (``dataset.json``'s bytes, at most MAX_MANIFEST_BYTES), checked
    strictly: InvalidInputError for another format, a newer version, or anything else the
    format does not allow (method names that are not plain lower-case names included)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise InvalidInputError(f"{where}: over {MAX_MANIFEST_BYTES:,} bytes")
    try:
        raw = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise InvalidInputError(f"{where}: not valid JSON (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidInputError(f"{where}: not valid JSON ({type(e).__name__})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise InvalidInputError(f"{where}: not a {FORMAT} dataset")
    version = raw.get("version")
    if type(version) is not int or not 1 <= version <= VERSION:
        shown = repr(version)[:40]
        raise InvalidInputError(
            f"{where}: version {shown}; this release reads versions 1-{VERSION}"
        )
    methods = raw.get("methods")
    if (
        not isinstance(methods, list)
        or len(methods) > MAX_METHODS
        or not all(isinstance(m, str) and METHOD_NAME.fullmatch(m) for m in methods)
        or len(set(methods)) != len(methods)
    ):
        raise InvalidInputError(
            f"{where}: 'methods' must be a list of at most {MAX_METHODS} distinct names "
            "of lower-case letters, digits and '_'"
        )
    given = raw.get("settings")
    settings: dict[str, Any] = given if isinstance(given, dict) else {}
    return Manifest(version, tuple(methods), settings)


def check_manifest(root: Path) -> Manifest:
    """The manifest of the dataset folder ``root``; InvalidInputError for another format or
    a newer version (read without following links, at most MAX_MANIFEST_BYTES)."""
    with DatasetFolder.at(root) as folder:
        data = folder.read_bytes(MANIFEST, MAX_MANIFEST_BYTES)
        return parse_manifest(data, folder.where(MANIFEST))
