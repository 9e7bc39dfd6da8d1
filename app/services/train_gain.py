"""The Train tab's gain since the start of a run: the library's paired interval over the
held-out problems of a session's first and last evaluations (``EvaluationOut.per_problem``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gmts_core.experiments.gain import PairedGain, paired_gain


def evaluation_gain(evaluations: Sequence[dict[str, Any]]) -> PairedGain | None:
    """The gain from the first to the last evaluation, paired problem by problem; None without
    two evaluations of the same problems (older sessions' bodies carry no per-problem list)."""
    if len(evaluations) < 2:
        return None
    first, last = evaluations[0].get("per_problem"), evaluations[-1].get("per_problem")
    if not first or not last or len(first) != len(last):
        return None
    return paired_gain(first, last)


def runs_difference(reference: Sequence[float], other: Sequence[float]) -> PairedGain | None:
    """``other - reference`` held-out accuracy of two runs' evaluations of the same problems
    (same seed, same step), paired problem by problem; None when they do not pair up."""
    if not reference or not other or len(reference) != len(other):
        return None
    return paired_gain(reference, other)
