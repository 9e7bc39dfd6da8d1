"""Which columns of a TRL completions file are the reward functions', and with which weights.

TRL's ``GRPOTrainer.log`` writes ``{step, prompt, completion, **rewards, **extra, advantage}``
(``trl/trainer/grpo_trainer.py``, TRL 1.16.0): one column per reward function, named after it
(``reward_func_names``), then any column a reward function logged through ``log_extra``
(``_log_completion_extra`` accepts any values, numbers included), then the advantage TRL trained
with. Nothing in the file says where the rewards end and the extras begin, nor which
``reward_weights`` were used (they live in ``training_args.bin``, a pickle). So:

1. **Named**: ``trainer_state.json`` logs ``rewards/<name>/mean`` for each reward function;
   where it exists, those names are the reward columns.
2. **Recovered**: else the reward columns are the first ``k`` numeric columns after
   ``completion`` (TRL writes rewards before extras) for the one ``k`` whose weighted sum
   reproduces the file's ``advantage`` the way TRL computed it (within every group the centred
   weighted sum is a positive multiple of the advantage: TRL's ``scale_rewards`` "group",
   "batch" and "none" alike; or ``multi_objective_aggregation="normalize_then_sum"``).
3. Where several ``k`` reproduce it (an extra column constant within every group) or none does,
   the file cannot tell, and :class:`RewardColumns` says so (``how``, ``note``).

Weights: unit weights (TRL's default) are tried first; else they are recovered up to a common
factor (the advantage does not change when every weight is scaled), as the direction whose
centred sum is proportional to the advantage in every group.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# TRL's advantage is float32; the rewards it logs too (rewards_per_func.tolist())
RELATIVE_TOLERANCE = 1e-3
TRL_STD_EPS = 1e-4  # TRL: advantages / (std_rewards + 1e-4)

NAMED, RECOVERED, AMBIGUOUS, UNKNOWN = "named", "recovered", "ambiguous", "unknown"


@dataclass(frozen=True)
class RewardColumns:
    """The reward columns of a completions file, their weights, and how they were found:
    ``named`` (trainer_state.json), ``recovered`` (the only columns that reproduce the
    advantage), ``ambiguous`` (several do: the shortest is used), ``unknown`` (none does, or
    there is no advantage: the rewards are not read)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    how: str
    note: str = ""

    def rewards(self, table: dict[str, np.ndarray]) -> np.ndarray | None:
        """Each row's weighted reward, TRL's way (``nansum``; NaN where every function
        abstained); None where the reward columns are unknown."""
        if not self.names:
            return None
        return weighted_sum(np.stack([table[n] for n in self.names], 1), np.array(self.weights))


def weighted_sum(per_func: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(n, k) rewards, (k,) weights -> (n,): ``nansum`` of the weighted rewards, NaN where
    every function returned None (TRL's ``unscorable_mask``)."""
    total = np.nansum(per_func * weights[None, :], axis=1)
    total[np.isnan(per_func).all(axis=1)] = np.nan
    return total


def reproduces(rewards: np.ndarray, advantage: np.ndarray, groups: Sequence[Sequence[int]]) -> bool:
    """Whether TRL's ``sum_then_normalize`` advantage of ``rewards`` is ``advantage``: within
    each group, rewards minus their mean (NaN rows left out: their advantage is 0) are a
    positive multiple of the advantage (the multiple, 1 / (std + 1e-4), is per group under
    ``scale_rewards="group"``, shared under "batch", 1 under "none")."""
    scale = max(1.0, float(np.nanmax(np.abs(advantage))) if advantage.size else 1.0)
    for rows in groups:
        r, a = rewards[list(rows)], advantage[list(rows)]
        scored = ~np.isnan(r)
        if np.any(np.abs(a[~scored]) > RELATIVE_TOLERANCE * scale):
            return False
        r, a = r[scored], a[scored]
        if r.size == 0:
            continue
        centred = r - r.mean()
        spread = float(np.abs(centred).max())
        if spread <= 1e-6 * max(1.0, float(np.abs(r).max())):
            if np.any(np.abs(a) > RELATIVE_TOLERANCE * scale):
                return False
            continue
        norm = float(a @ a)
        if norm == 0.0:
            return False
        factor = float(centred @ a) / norm
        if factor <= 0 or np.abs(centred - factor * a).max() > RELATIVE_TOLERANCE * spread:
            return False
    return True


def _standardised_per_function(per_func: np.ndarray, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """TRL's ``normalize_then_sum`` step before the weights: each function's rewards
    standardised within the group (unbiased std, eps 1e-4; NaN stays NaN)."""
    z = np.full_like(per_func, np.nan)
    for rows in groups:
        block = per_func[list(rows)]
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a function NaN throughout a group
            mean = np.nanmean(block, axis=0, keepdims=True)
            std = (
                np.nanstd(block, axis=0, ddof=1, keepdims=True)
                if len(rows) > 1
                else np.zeros_like(mean)
            )
        z[list(rows)] = (block - mean) / (std + TRL_STD_EPS)
    return z


def _weight_system(
    per_func: np.ndarray, advantage: np.ndarray, groups: Sequence[Sequence[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The linear system whose null vectors are the weights w with centred weighted sums
    proportional to the advantage in every group: the stacked (I - a a^T / a^T a) C_g, C_g a
    group's rewards centred (an abstention, NaN, counts 0 in TRL's ``nansum``; a row where
    every function abstained is left out, as TRL leaves it out of the mean). Returns it, its
    singular values (k of them) and right singular vectors."""
    blocks = []
    for rows in groups:
        c = per_func[list(rows)]
        scored = ~np.isnan(c).all(axis=1)
        c, a = np.nan_to_num(c[scored]), advantage[list(rows)][scored]
        if len(a) == 0:
            continue
        c = c - c.mean(axis=0, keepdims=True)
        norm = float(a @ a)
        project = np.eye(len(a)) - (np.outer(a, a) / norm if norm > 0 else 0.0)
        blocks.append(project @ c)
    k = per_func.shape[1]
    m = np.concatenate(blocks, 0) if blocks else np.zeros((0, k))
    if m.shape[0] == 0:
        return m, np.zeros(k), np.eye(k)
    _, s, vt = np.linalg.svd(m, full_matrices=True)
    return m, np.concatenate([s, np.zeros(max(0, k - s.size))]), vt


def _null_dimension(s: np.ndarray, matrix: np.ndarray) -> int:
    """How many singular values are 0 to float32 precision (TRL's advantage is float32)."""
    scale = max(1.0, float(np.nanmax(np.abs(matrix))) if matrix.size else 1.0)
    return int((s <= 1e-4 * scale).sum())


def _fitted_weights(
    per_func: np.ndarray, advantage: np.ndarray, groups: Sequence[Sequence[int]]
) -> np.ndarray | None:
    """The weight direction w (max |w| = 1) whose centred weighted sum is proportional to the
    advantage in every group; None where no such direction, or more than one, exists."""
    _, s, vt = _weight_system(per_func, advantage, groups)
    if _null_dimension(s, per_func) != 1:
        return None
    w = vt[-1] / np.abs(vt[-1]).max()
    filled = np.nan_to_num(per_func)
    centred = np.concatenate([(filled[list(r)] - filled[list(r)].mean(0)) @ w for r in groups])
    flat_adv = np.concatenate([advantage[list(r)] for r in groups])
    return -w if float(centred @ flat_adv) < 0 else w


def weights_identifiable(
    per_func: np.ndarray, advantage: np.ndarray, groups: Sequence[Sequence[int]]
) -> bool:
    """Whether the file fixes the weights (up to one common factor): one reward column, or a
    single direction of weights reproduces the advantage (a group of 2 answers fixes little)."""
    if per_func.shape[1] == 1:
        return True
    _, s, _ = _weight_system(per_func, advantage, groups)
    return _null_dimension(s, per_func) == 1


def _constraints(per_func: np.ndarray, groups: Sequence[Sequence[int]]) -> int:
    scored = ~np.isnan(per_func).all(axis=1)
    return sum(max(0, int(scored[list(rows)].sum()) - 2) for rows in groups)


def _match(
    per_func: np.ndarray, advantage: np.ndarray, groups: Sequence[Sequence[int]]
) -> tuple[np.ndarray, str] | None:
    """The weights (unit first, else recovered) under which these reward columns reproduce the
    advantage (TRL's ``sum_then_normalize``, then ``normalize_then_sum``), and a word on how;
    None when none do."""
    unit = np.ones(per_func.shape[1])
    whole = [list(range(len(advantage)))]
    ways = (
        ("", per_func, groups),
        (", normalize_then_sum", _standardised_per_function(per_func, groups), whole),
    )
    # unit weights (TRL's default) first, under either aggregation; then recovered ones
    candidates: list[tuple[np.ndarray, str, np.ndarray, list[list[int]]]] = [
        (unit, "unit weights, TRL's default" + way, matrix, list(map(list, grouping)))
        for way, matrix, grouping in ways
    ]
    for way, matrix, grouping in ways:
        # fitted weights are evidence only where the groups hold more constraints than the
        # weights have freedom (a group of n scored answers gives n - 2), and only positive
        # ones (a weight of ~0 or below would make any column a "reward")
        k = matrix.shape[1]
        if k == 1 or _constraints(matrix, grouping) <= k:
            continue
        fitted = _fitted_weights(matrix, advantage, grouping)
        if fitted is not None and fitted.min() > 1e-2 and not np.allclose(fitted, unit, atol=1e-3):
            how = "weights recovered up to a common factor" + way
            candidates.append((fitted, how, matrix, list(map(list, grouping))))
    found: list[tuple[np.ndarray, str]] = []
    for weights, how, matrix, grouping in candidates:
        if reproduces(weighted_sum(matrix, weights), advantage, grouping):
            if not weights_identifiable(matrix, advantage, grouping):
                how += _CANNOT_TELL_WEIGHTS
            found.append((weights, how))
    if not found:
        return None
    weights, how = found[0]
    # another aggregation reproduces it with other weights (one group: standardising each
    # function first equals other weights): the weights cannot be told
    others = [w for w, _ in found[1:] if not np.allclose(w, weights, atol=1e-3)]
    if others and _CANNOT_TELL_WEIGHTS not in how:
        how += _CANNOT_TELL_WEIGHTS
    return weights, how


_CANNOT_TELL_WEIGHTS = (
    "; the file cannot tell the reward_weights: other weights reproduce the advantage as well"
)


def find_reward_columns(
    numeric: dict[str, np.ndarray],
    advantage: np.ndarray | None,
    groups: Sequence[Sequence[int]],
    named: Sequence[str] | None = None,
) -> RewardColumns:
    """The reward columns among ``numeric`` (the numeric columns after ``completion``, in file
    order, as float64 with NaN for None); ``named``: the reward functions' names from the
    run's ``trainer_state.json`` (None: not known)."""
    order = list(numeric)
    if named:
        names = [n for n in named if n in numeric]
        missing = [n for n in named if n not in numeric]
        if names and not missing:
            weights = np.ones(len(names))
            note = "reward columns named by trainer_state.json"
            if advantage is not None:
                found = _match(np.stack([numeric[n] for n in names], 1), advantage, groups)
                if found is not None:
                    weights = found[0]
                    note += f" ({found[1]})"
                else:
                    note += "; their unit-weighted sum does not reproduce the file's advantage"
            return RewardColumns(tuple(names), tuple(map(float, weights)), NAMED, note)
    if advantage is None:
        return RewardColumns(
            (),
            (),
            UNKNOWN,
            "the file has no 'advantage' column and the run no trainer_state.json naming the "
            "reward functions: which numeric columns are rewards cannot be told; rewards not read",
        )
    if not order:
        return RewardColumns((), (), UNKNOWN, "the file has no numeric column but the advantage")
    if _constraints(np.stack([numeric[n] for n in order], 1), groups) == 0:
        # groups of 2: any column's centred values are +-d, proportional to the advantage
        return RewardColumns(
            (order[0],),
            (1.0,),
            AMBIGUOUS,
            "groups of at most 2 scored answers: the advantage fixes only signs, so the file "
            f"cannot tell which columns are rewards; the first, {order[0]!r}, is used (TRL "
            "writes the reward functions' columns first), the logged advantage rules",
        )
    matches = []
    for k in range(1, len(order) + 1):
        found = _match(np.stack([numeric[n] for n in order[:k]], 1), advantage, groups)
        if found is not None:
            matches.append((order[:k], found))
    if not matches:
        return RewardColumns(
            (),
            (),
            UNKNOWN,
            "no leading set of numeric columns reproduces the file's advantage: the reward "
            "columns cannot be told; the logged advantage is used, rewards not read",
        )
    names, (weights, how) = matches[0]
    if len(matches) > 1:
        others = " or ".join("+".join(m[0]) for m in matches[1:])
        return RewardColumns(
            tuple(names),
            tuple(map(float, weights)),
            AMBIGUOUS,
            f"the file cannot tell whether the rewards are {'+'.join(names)} or {others} "
            "(each reproduces the advantage); the shortest is used, the logged advantage rules",
        )
    return RewardColumns(
        tuple(names),
        tuple(map(float, weights)),
        RECOVERED,
        f"reward columns recovered as those reproducing the file's advantage ({how})",
    )
