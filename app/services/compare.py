"""The compare service: selection methods trained side by side, for the UI and the CLI.

It builds a :class:`~gmts_core.experiments.compare.CompareConfig` from a front end's knobs, applies
this server's per-step limits (the same check as a session's step), runs
:func:`gmts_core.experiments.compare.run_compare` in a job slot (it holds the slot for its whole
run), reads a
finished ``compare.json`` back, and writes ``compare.json``, ``compare.html`` and ``table.md``.
"""

from __future__ import annotations

import dataclasses
import json
import stat
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.reports.compare_report import compare_html, table_markdown
from app.services.jobs import JobLimiter
from app.services.model_registry import ModelRegistry
from app.services.policy import LimitsPolicy
from app.services.sessions import check_step_limits
from gmts_core.config import RLConfig
from gmts_core.errors import GMTSError, InvalidInputError
from gmts_core.experiments.compare import (
    COMPARE_RECIPE,
    CompareConfig,
    CompareResult,
    Progress,
    RunCurve,
    run_compare,
    run_steps,
)
from gmts_core.grpo.policy import PolicySettings
from gmts_core.tasks.mixes import DEFAULT_TASK_MIX

MAX_FILE_BYTES = 50_000_000
# the knobs that set a compare's noise besides its seeds and problems: which training seeds,
# which evaluation draws, how many answers per held-out problem and at what temperature
NOISE_KNOBS = ("seed_offset", "eval_seed", "eval_samples", "eval_temperature")

__all__ = [
    "NOISE_KNOBS",
    "CompareResult",
    "CompareService",
    "compare_config",
    "load_compare_file",
    "result_from_dict",
    "write_outputs",
]


def compare_config(
    methods: tuple[str, ...],
    ratio: float,
    steps: int,
    seeds: int,
    eval_every: int,
    eval_problems: int,
    base: RLConfig = COMPARE_RECIPE,
    task_mix: str = DEFAULT_TASK_MIX,
    noise: dict[str, Any] | None = None,
    **rl: Any,
) -> CompareConfig:
    """A validated CompareConfig: the run knobs, the task mix of its training prompts, the
    controls of its noise (``noise``: any of NOISE_KNOBS; the defaults where left out) and
    ``rl`` overrides of ``base``'s GRPO knobs."""
    defaults = CompareConfig()
    extra = {k: type(getattr(defaults, k))((noise or {}).get(k, getattr(defaults, k)))
             for k in NOISE_KNOBS}  # fmt: skip
    config = CompareConfig(
        methods=tuple(methods),
        ratio=float(ratio),
        steps=int(steps),
        seeds=int(seeds),
        eval_every=int(eval_every),
        eval_problems=int(eval_problems),
        task_mix=str(task_mix),
        rl=dataclasses.replace(base, **rl),
        **extra,
    )
    config.validate()
    return config


class CompareService:
    """Runs compares within this server's limits; reads and writes their results."""

    def __init__(self, settings: Settings, models: ModelRegistry, jobs: JobLimiter) -> None:
        self.settings = settings
        self.models = models
        self.jobs = jobs

    def check_limits(self, config: CompareConfig) -> None:
        """Each step of a compare run is a GRPO step: the sessions' per-step limits apply."""
        config.validate()
        check_step_limits(self.settings, config.run_config(config.methods[0]))

    def run(
        self,
        model: str | None,
        config: CompareConfig,
        progress: Progress | None = None,
        limits: LimitsPolicy | None = None,
    ) -> CompareResult:
        """The compare core: validate ``config``, apply the policy (the server's: the sessions'
        per-step limits; the CLI's: none, any model source), run on the registry's model.
        Blocking, and it holds a job slot for its whole run when the caller runs it in the job
        line (the UI does)."""
        limits = limits or LimitsPolicy.server(self.settings)
        if limits.any_model_source:
            config.validate()
        else:
            self.check_limits(config)
        ref = self.models.resolve(model, any_source=limits.any_model_source)
        self.models.ensure_available(ref)
        return run_compare(self.models.load(ref), config, progress)

    def run_steps(
        self, model: str | None, config: CompareConfig, method: str, seed: int
    ) -> Iterator[tuple[int, Any, Any]]:
        """One run of the compare core (``method`` from ``seed``), step by step, as
        :meth:`run` trains it: (step, its result, the policy); for a caller that times each
        step (benchmarks/train_tab.py interleaves them with the Train tab's)."""
        config.validate()
        return run_steps(self.models.load(self.models.resolve(model)), method, seed, config)


# --- a compare JSON back into a CompareResult --------------------------------------------------


def _build(cls: type, data: Any, **nested: Any) -> Any:
    """A dataclass from its ``asdict`` form (JSON lists back to tuples, unknown keys ignored)."""
    if not isinstance(data, dict):
        raise InvalidInputError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
    values = {}
    for f in fields(cls):
        if f.name in nested:
            values[f.name] = nested[f.name]
        elif f.name in data:
            v = data[f.name]
            values[f.name] = tuple(v) if isinstance(v, list) and "tuple" in str(f.type) else v
    try:
        return cls(**values)
    except TypeError as exc:
        raise InvalidInputError(f"{cls.__name__}: {exc}") from None


def _scores(values: Any, what: str) -> list[float]:
    """Per-problem scores from JSON: a list of numbers in [0, 1]."""
    if not isinstance(values, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in values
    ):
        raise InvalidInputError(f"{what} must be a list of per-problem scores in [0, 1]")
    return [float(v) for v in values]


def result_from_dict(data: dict[str, Any]) -> CompareResult:
    """The :class:`CompareResult` of ``CompareResult.to_dict()`` (e.g. a loaded compare.json)."""
    missing = [k for k in ("model", "config", "runs", "start_accuracy") if k not in data]
    if missing:
        raise InvalidInputError(
            f"not a `gmts compare` JSON (compare.json): missing {', '.join(missing)}"
        )
    c = data["config"]
    config = _build(
        CompareConfig,
        c,
        rl=_build(RLConfig, c.get("rl", {})),
        policy=_build(PolicySettings, c.get("policy", {})),
    )
    runs = []
    for r in data["runs"]:
        if not isinstance(r, dict):
            raise InvalidInputError("every run of a compare JSON must be an object")
        acc = {int(k): float(v) for k, v in (r.get("accuracy") or {}).items()}
        scores = _scores(r.get("final_per_problem", []), "a run's final_per_problem")
        runs.append(_build(RunCurve, r, accuracy=acc, final_per_problem=scores))
    seeds = sorted(run.seed for run in runs if run.method == config.methods[0])
    for m in config.methods:
        if not any(run.method == m for run in runs):
            raise InvalidInputError(f"the compare JSON has no runs of method {m!r}")
        if sorted(run.seed for run in runs if run.method == m) != seeds:
            raise InvalidInputError(f"the compare JSON's runs of {m!r} have other seeds")
    if any(config.steps not in run.accuracy or not run.wasted_share for run in runs):
        raise InvalidInputError("every run of a compare JSON needs its final accuracy")
    start = _scores(data.get("start_per_problem", []), "start_per_problem")
    return CompareResult(
        config,
        str(data["model"]),
        runs,
        float(data["start_accuracy"]),
        data.get("seconds", 0.0),
        start,
    )


def load_compare_file(path: str | Path) -> CompareResult:
    """Read a compare.json (size-limited, a regular file) into a result, with a clear error
    otherwise: an upload is bytes from outside, so any JSON that is not a `gmts compare` result
    (nested too deeply, fields of another type) is an InvalidInputError naming the file."""
    p = Path(path)
    try:
        st = p.lstat()
    except OSError as exc:
        raise InvalidInputError(f"{p.name} cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInputError(f"{p.name} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise InvalidInputError(f"{p.name} is over {MAX_FILE_BYTES // 1_000_000} MB")
    try:
        data = json.loads(p.read_bytes()[: MAX_FILE_BYTES + 1].decode("utf-8"))
    except RecursionError:
        raise InvalidInputError(
            f"{p.name} is not JSON this tool reads (nested too deeply)"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"{p.name} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{p.name}: not a `gmts compare` JSON (expected an object)")
    try:
        return result_from_dict(data)
    except GMTSError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        what = f"{type(exc).__name__}: {str(exc)[:120]}"
        raise InvalidInputError(
            f"{p.name}: not a `gmts compare` result this version reads ({what})"
        ) from None


def write_outputs(result: CompareResult, out: Path) -> list[Path]:
    """compare.json, compare.html and table.md in ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compare.json", out / "compare.html", out / "table.md"]
    paths[0].write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(compare_html(result), encoding="utf-8")
    paths[2].write_text(table_markdown(result) + "\n", encoding="utf-8")
    return paths
