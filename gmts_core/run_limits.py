"""The budgets of one reading of a run (:class:`RunLimits`: file, line, step, field, answers,
rows, folder entries, steps) and the error that names an exceeded one.

The readers that check them are in :mod:`gmts_core.runs.limits` (Arrow, numpy); the budgets are
here, importing only the standard library, so the server's settings (``GMTS_RUN_MAX_*``) and
``gmts serve --help`` read their defaults without Arrow or the run readers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from gmts_core.errors import LimitExceededError

MiB = 1 << 20


@dataclass(frozen=True)
class RunLimits:
    """How much of a run one reading may touch (defaults: the server's).

    ``setting_prefix``/``setting_style`` only shape the error messages: ``env`` names the
    ``GMTS_RUN_MAX_*`` environment variable, ``cli`` the ``--run-max-*`` option.
    """

    max_file_bytes: int = 1024 * MiB  # one file (a single-file JSONL run is read whole to index)
    max_line_bytes: int = 8 * MiB  # one JSONL line (a ROLL step is one line)
    max_step_bytes: int = 256 * MiB  # one step: its file, its lines, its parquet columns
    max_field_chars: int = 64_000  # one prompt or completion, before any tokenizer sees it
    max_group_answers: int = 512  # answers sampled for one prompt in one step
    max_step_rows: int = 16_384  # lines / parquet rows / samples of one step
    max_folder_entries: int = 10_000  # entries listed in one folder (more: refused)
    max_run_steps: int = 100_000  # steps one run's index may hold (a single JSONL file's)
    setting_style: str = "env"
    # every file opened must resolve inside this folder (the server's run root; None: anywhere)
    root: str | None = None

    def setting(self, name: str) -> str:
        """The setting that raises limit ``name`` (a field of this class)."""
        if self.setting_style == "cli":
            return "--run-" + name.replace("_", "-")
        return "GMTS_RUN_" + name.upper()

    def exceeded(self, name: str, where: str, what: str) -> RunLimitError:
        value = getattr(self, name)
        return RunLimitError(name, value, self.setting(name), where, what)

    def check(self, name: str, amount: int, where: str, what: str) -> None:
        """Raise :class:`RunLimitError` if ``amount`` is over limit ``name``."""
        if amount > getattr(self, name):
            raise self.exceeded(name, where, what)


#: ``gmts analyze-run``'s defaults: a person's own machine, one run at a time.
CLI_LIMITS = RunLimits(
    max_file_bytes=64 * 1024 * MiB,
    max_line_bytes=256 * MiB,
    max_step_bytes=4096 * MiB,
    max_field_chars=1_000_000,
    max_group_answers=8_192,
    max_step_rows=1_000_000,
    max_folder_entries=1_000_000,
    max_run_steps=10_000_000,
    setting_style="cli",
)

LIMIT_NAMES = tuple(f.name for f in fields(RunLimits) if f.name.startswith("max_"))


class RunLimitError(LimitExceededError):
    """A run file is larger than a :class:`RunLimits` budget; the message names the limit
    and the setting that raises it."""

    code = "run_limit_exceeded"

    def __init__(self, limit: str, value: int, setting: str, where: str, what: str) -> None:
        self.limit, self.value, self.setting = limit, value, setting
        super().__init__(
            f"{where}: {what}, over the limit {limit} = {value:,} (raise it with {setting})"
        )
