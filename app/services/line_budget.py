"""Text files read line by line within a size budget, as the run readers read theirs.

``gmts analyze-file`` reads a rollout dump one JSON object per line; a line is read with the
run readers' bounded ``readline`` (:func:`gmts_core.runs.limits.bounded_lines`), so a line
longer than the budget's ``max_line_bytes`` is refused after reading that many bytes of it,
never held whole, with an error naming the limit and the option that raises it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gmts_core.run_limits import RunLimits

__all__ = ["jsonl_lines"]


def jsonl_lines(path: Path, limits: RunLimits) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of ``path``, each line read within ``limits.max_line_bytes``
    (a longer one raises :class:`~gmts_core.runs.limits.RunLimitError`)."""
    from gmts_core.runs.limits import bounded_lines  # Arrow: when a file is read, not for --help

    with path.open("rb") as f:
        yield from bounded_lines(f, limits, path)
