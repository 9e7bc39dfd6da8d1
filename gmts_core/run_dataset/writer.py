"""Write one analysed step into the dataset (:mod:`gmts_core.run_dataset.schema`).

The writer works on flat numpy columns (:class:`StepColumns`), built from an
:class:`~gmts_core.analysis.records.AnalysisResult`'s flat tensors without creating a record
per token, so it keeps pace with the analysis. Each file is written to a temporary name and
renamed, the steps file last: a step is in the dataset once its steps file exists, and a
reader of a growing run never sees half a step.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gmts_core.analysis.records import AnalysisResult
from gmts_core.errors import InvalidInputError
from gmts_core.run_dataset import steps_index
from gmts_core.run_dataset.positions import positions_bytes
from gmts_core.run_dataset.schema import (
    ANSWER_GROUPS,
    COMPRESSION,
    ROW_GROUP_ROWS,
    TOP_K,
    TOP_ORDERS,
    compared_pair,
    schema,
    step_file,
)


@dataclass
class StepColumns:
    """One step's flat columns, tokens in (group, answer, position) order.

    Per token (N,): ``group``, ``answer`` (within its group), ``position``, ``token_id``,
    ``text``, ``logprob``, ``entropy``, ``grad_norm``, ``gamma``, ``selected[m]``.
    Per answer (M,), in the same order: ``answer_group``, ``answer_index``, ``prompt``,
    ``answer_text``, ``reward``, ``advantage``, ``weight``, ``length``.
    """

    step: int
    methods: tuple[str, ...]
    group: np.ndarray
    answer: np.ndarray
    position: np.ndarray
    token_id: np.ndarray
    text: list[str] | pa.Array  # a list, or an Arrow (dictionary) string array
    logprob: np.ndarray
    entropy: np.ndarray
    grad_norm: np.ndarray
    gamma: np.ndarray
    selected: dict[str, np.ndarray]
    answer_group: np.ndarray
    answer_index: np.ndarray
    prompt: list[str]
    answer_text: list[str] | pa.Array
    reward: np.ndarray
    advantage: np.ndarray
    weight: np.ndarray
    length: np.ndarray
    # optional columns (schema.OPTIONAL_*_COLUMNS): per token (N,) float32 or bool, and the
    # step row's numbers; written where given, after the required ones
    token_extra: dict[str, np.ndarray] = field(default_factory=dict)
    step_extra: dict[str, float | int | None] = field(default_factory=dict)
    # numbers this dataset does not have (a dump's logged numbers without a model: "grad_norm",
    # "gamma"): written as null, with what is derived from them (gamma_rank, gamma_sum,
    # coverage_m, wasted_m, the top orders by them)
    absent: tuple[str, ...] = ()

    @classmethod
    def from_result(cls, step: int, result: AnalysisResult) -> StepColumns:
        """The columns of an analysed step, read from the result's flat tensors."""
        x = result.inputs
        if x is None:
            raise InvalidInputError("the analysis result carries no flat inputs to write")
        answers = result.iter_answers()
        lengths = np.array([len(ids) for ids in result.token_ids], dtype=np.int32)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        n = int(lengths.sum())
        a_group = np.array([g.index for g, _ in answers], dtype=np.int32)
        a_index = np.array([a.index for _, a in answers], dtype=np.int32)
        return cls(
            step=step,
            methods=tuple(result.config.methods),
            group=np.repeat(a_group, lengths),
            answer=np.repeat(a_index, lengths),
            position=(np.arange(n, dtype=np.int64) - np.repeat(starts, lengths)).astype(np.int32),
            token_id=np.fromiter(
                (i for ids in result.token_ids for i in ids), dtype=np.int64, count=n
            ),
            text=[t for texts in result.token_texts for t in texts],
            logprob=x.logprob.float().numpy(),
            entropy=x.entropy.float().numpy(),
            grad_norm=x.grad_norm.float().numpy(),
            gamma=x.grad_proxy.float().numpy(),
            selected={m: s.selected.numpy() for m, s in result.selections.items()},
            answer_group=a_group,
            answer_index=a_index,
            prompt=[g.prompt for g, _ in answers],
            answer_text=[a.text for _, a in answers],
            reward=np.array([a.reward for _, a in answers], dtype=np.float32),
            advantage=np.array([a.advantage for _, a in answers], dtype=np.float32),
            weight=np.array([a.weight for _, a in answers], dtype=np.float32),
            length=lengths,
        )


def batch_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, highest first, ties in flat order (the selection's own rule); NaN last.

    One sort of 64-bit keys (the value's order-preserving bits, then the token's index), not
    a stable sort of floats: the same ranks, several times faster."""
    n = len(values)
    if n >= 1 << 32 or values.dtype.itemsize > 4:
        clean = np.where(np.isnan(values), -np.inf, values.astype(np.float64))
        order = np.argsort(-clean, kind="stable")
    else:
        clean32 = np.where(np.isnan(values), -np.inf, values.astype(np.float32)) + np.float32(0)
        bits = clean32.view(np.uint32)  # + 0 made -0.0 into 0.0: equal values, equal bits
        ascending = np.where(bits >> 31 == 1, ~bits, bits | np.uint32(1 << 31))
        keys = (~ascending).astype(np.uint64) << np.uint64(32) | np.arange(n, dtype=np.uint64)
        order = (np.sort(keys) & np.uint64(0xFFFFFFFF)).astype(np.int64)
    ranks = np.empty(n, dtype=np.int32)
    ranks[order] = np.arange(1, n + 1, dtype=np.int32)
    return ranks


def top_indices(score: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` highest of ``score`` (NaN lowest), highest first, ties in
    flat order: a partition, then a sort of those ``k`` only."""
    clean = np.where(np.isnan(score), -np.inf, score.astype(np.float64))
    if len(clean) <= k:
        return np.argsort(-clean, kind="stable")
    kth = np.partition(clean, len(clean) - k)[len(clean) - k]
    above = np.flatnonzero(clean > kth)
    tied = np.flatnonzero(clean == kth)[: k - len(above)]
    idx = np.concatenate([above, tied])
    return idx[np.lexsort((idx, -clean[idx]))]


def prompt_key(text: str) -> int:
    """A stable 64-bit key of a prompt's text (the same prompt in any step or run)."""
    return int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
    )


def _dictionary(texts: list[str] | pa.Array) -> pa.Array:
    if isinstance(texts, pa.DictionaryArray):
        return texts.cast(pa.dictionary(pa.int32(), pa.string()))
    return pa.array(texts, pa.string()).dictionary_encode()


def _write(table: pa.Table, path: Path, rows: int = ROW_GROUP_ROWS, packed: bool = True) -> None:
    """``table`` at ``path`` (whole or not at all); ``packed``: compressed (the word index's
    byte strings are not: a search reads them whole, decompressing would be its cost)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(
        table,
        tmp,
        compression=COMPRESSION if packed else "none",
        row_group_size=rows,
        use_dictionary=["text", "prompt"] if packed else False,
        write_statistics=True,
    )
    tmp.replace(path)


def _per_answer(values: np.ndarray, lengths: np.ndarray, how: str) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    nonempty = lengths > 0
    out = np.zeros(len(lengths), dtype=np.float64)
    if values.size:
        sums = np.add.reduceat(values.astype(np.float64), starts[nonempty])
        out[nonempty] = sums if how == "sum" else sums / lengths[nonempty]
    if how == "mean":
        out[~nonempty] = np.nan
    return out


def write_step(root: Path, cols: StepColumns) -> None:
    """Write the step's tokens, top, answers, positions (the word index) and (last) steps
    files under ``root``."""
    methods = cols.methods
    n, m = len(cols.gamma), len(cols.length)
    if int(cols.length.sum()) != n:
        raise InvalidInputError(f"step {cols.step}: answer lengths do not add up to the tokens")
    a_of_token = np.repeat(np.arange(m), cols.length)
    no_gamma = "gamma" in cols.absent
    step_col = np.full(n, cols.step, dtype=np.int32)
    token_cols = {
        "step": step_col,
        "group": cols.group.astype(np.int32),
        "answer": cols.answer.astype(np.int32),
        "position": cols.position.astype(np.int32),
        "token_id": cols.token_id.astype(np.int64),
        "text": _dictionary(cols.text),
        "reward": cols.reward[a_of_token],
        "advantage": cols.advantage[a_of_token],
        "weight": cols.weight[a_of_token],
        "logprob": cols.logprob.astype(np.float32),
        "entropy": cols.entropy.astype(np.float32),
        "grad_norm": _or_null(cols.grad_norm, "grad_norm" in cols.absent, pa.float32()),
        "gamma": _or_null(cols.gamma, no_gamma, pa.float32()),
        "entropy_rank": batch_ranks(cols.entropy),
        "gamma_rank": pa.nulls(n, pa.int32()) if no_gamma else batch_ranks(cols.gamma),
        **{f"selected_{k}": cols.selected[k].astype(bool) for k in methods},
    }
    tokens = pa.table(token_cols, schema=schema("tokens", methods))
    top = top_table(tokens, methods)
    for name, values in cols.token_extra.items():  # optional: after the schema's columns
        if len(values) != n:
            raise InvalidInputError(f"step {cols.step}: column {name} has {len(values)} values")
        tokens = tokens.append_column(name, pa.array(values))
    _write(tokens, step_file(root, "tokens", cols.step))
    _write(top, step_file(root, "top", cols.step))

    pair = compared_pair(methods)
    if pair is None:
        differ = np.zeros(n, bool)
    else:  # a token one of the pair selects and the other does not
        differ = cols.selected[pair[0]].astype(bool) != cols.selected[pair[1]].astype(bool)
    reward_by_group: dict[int, set[float]] = {}
    for g, r in zip(cols.answer_group.tolist(), cols.reward.tolist(), strict=True):
        reward_by_group.setdefault(g, set()).add(r)
    zero = np.array([len(reward_by_group[g]) == 1 for g in cols.answer_group.tolist()], bool)
    answer_cols = {
        "step": np.full(m, cols.step, dtype=np.int32),
        "group": cols.answer_group.astype(np.int32),
        "answer": cols.answer_index.astype(np.int32),
        "prompt_key": np.array([prompt_key(p) for p in cols.prompt], dtype=np.uint64),
        "prompt": pa.array(cols.prompt, pa.string()).dictionary_encode(),
        "text": cols.answer_text,
        "reward": cols.reward,
        "advantage": cols.advantage,
        "length": cols.length.astype(np.int32),
        "zero_signal": zero,
        "entropy_mean": _per_answer(cols.entropy, cols.length, "mean").astype(np.float32),
        "gamma_sum": pa.nulls(m, pa.float32())
        if no_gamma
        else _per_answer(cols.gamma, cols.length, "sum").astype(np.float32),
        "disagreement": _per_answer(differ.astype(np.int64), cols.length, "sum").astype(np.int32),
        "first_row": np.concatenate([[0], np.cumsum(cols.length)[:-1]]).astype(np.int64),
        **{
            f"selected_count_{k}": _per_answer(
                cols.selected[k].astype(np.int64), cols.length, "sum"
            ).astype(np.int32)
            for k in methods
        },
    }
    _write(  # small row groups: a ranking's page reads the groups of its rows, not the step
        pa.table(answer_cols, schema=schema("answers", methods)),
        step_file(root, "answers", cols.step),
        rows=max(1024, -(-m // ANSWER_GROUPS)),
    )
    _write_bytes(positions_bytes(cols.step, answer_cols["text"]), positions_file(root, cols.step))

    total = float(cols.gamma.astype(np.float64).sum())
    step_row: dict[str, list] = {
        "step": [cols.step],
        "num_groups": [len(reward_by_group)],
        "num_answers": [m],
        "num_tokens": [n],
        "reward_mean": [float(cols.reward.mean()) if m else None],
        "entropy_mean": [float(cols.entropy.astype(np.float64).mean()) if n else None],
        "zero_signal_share": [
            sum(len(v) == 1 for v in reward_by_group.values()) / len(reward_by_group)
            if reward_by_group
            else None
        ],
        "overlap": [
            _jaccard(cols.selected[pair[0]], cols.selected[pair[1]]) if pair is not None else None
        ],
    }
    for k in methods:
        sel = cols.selected[k].astype(bool)
        if no_gamma:  # coverage and waste are shares of gamma: not known without it
            step_row[f"coverage_{k}"], step_row[f"wasted_{k}"] = [None], [None]
            continue
        kept = float(cols.gamma[sel].astype(np.float64).sum())
        step_row[f"coverage_{k}"] = [kept / total if total > 0 else (1.0 if sel.all() else 0.0)]
        picks = int(sel.sum())
        step_row[f"wasted_{k}"] = [int(((cols.gamma == 0) & sel).sum()) / picks if picks else 0.0]
    steps = pa.table(step_row, schema=schema("steps", methods))
    for name, value in cols.step_extra.items():
        kind = pa.int64() if isinstance(value, int) else pa.float32()
        steps = steps.append_column(name, pa.array([value], kind))
    _write(steps, step_file(root, "steps", cols.step))
    steps_index.append(root, cols.step, steps.to_pylist()[0])


def _or_null(values: np.ndarray, absent: bool, kind: pa.DataType) -> np.ndarray | pa.Array:
    return pa.nulls(len(values), kind) if absent else values.astype(np.float32)


def top_table(tokens: pa.Table, methods: tuple[str, ...]) -> pa.Table:
    """The step's TOP_K tokens by each order of TOP_ORDERS (ties in flat order); an order by
    a number the dataset does not have (a null column) has no rows."""
    no_gamma = tokens.num_rows > 0 and tokens["gamma_rank"].null_count == tokens.num_rows
    scores = {
        "gamma": tokens["gamma"].to_numpy(),
        "entropy": tokens["entropy"].to_numpy(),
        "grad_norm": tokens["grad_norm"].to_numpy(),
        "rank_gap": np.zeros(0)  # a dump's numbers alone (no gamma): no rank gap
        if no_gamma
        else np.abs(
            tokens["entropy_rank"].to_numpy().astype(np.int64)
            - tokens["gamma_rank"].to_numpy().astype(np.int64)
        ),
    }
    names = ("gamma", "grad_norm", "rank_gap") if no_gamma else ()
    assert set(scores) == set(TOP_ORDERS)
    parts = []
    for key, score in scores.items():
        if key in names:
            continue
        clean = np.where(np.isnan(score), -np.inf, score.astype(np.float64))
        idx = top_indices(clean, TOP_K)
        part = tokens.take(pa.array(idx))
        part = part.add_column(0, "score", pa.array(clean[idx], pa.float64()))
        keys = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(len(idx), np.int8)), pa.array([key])
        )
        parts.append(part.add_column(0, "order_key", keys))
    return pa.concat_tables(parts).cast(schema("top", methods))


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    union = int((a | b).sum())
    return int((a & b).sum()) / union if union else 1.0


def _write_bytes(data: bytes, path: Path) -> None:
    """``data`` at ``path`` (whole or not at all)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".idx.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def positions_file(root: Path, step: int) -> Path:
    """Where a step's word index (its third form: :mod:`gmts_core.run_dataset.positions`) is."""
    return root / "positions" / f"step_{step:05d}.idx"


def reindex(root: Path, step: int) -> None:
    """Give a step written before the word index's positions its ``positions`` file, and its
    answers file the writer's row groups (a ranking's page reads only its rows' groups); its
    other files (an earlier form of the index included) are left as they are."""
    path = step_file(root, "answers", step)
    answers = pq.read_table(path)
    m = answers.num_rows
    if pq.ParquetFile(path).metadata.num_row_groups < -(-m // max(1024, -(-m // ANSWER_GROUPS))):
        _write(answers, path, rows=max(1024, -(-m // ANSWER_GROUPS)))
    _write_bytes(positions_bytes(step, answers["text"]), positions_file(root, step))
