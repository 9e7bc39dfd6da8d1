"""``gmts analyze-run``'s logic: open a run, analyse the asked steps (sharded across processes
under ``accelerate launch``), merge, and write ``report.json`` and ``report.html``.

Under ``accelerate launch`` (or ``torchrun``: any launcher that sets ``WORLD_SIZE``) each
process analyses every ``world``-th step on its own device (``accelerate``'s
``PartialState``), then the main process merges the shards into one report, identical to a
single-process run of the same steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from app.reports.run_charts import run_report_html
from app.services.model_registry import ModelRegistry
from gmts_core.config import AnalysisConfig
from gmts_core.errors import InvalidInputError
from gmts_core.runs import CLI_LIMITS, LIMIT_NAMES, RunLimits, open_run
from gmts_core.runs.analysis import StepReport, parse_steps
from gmts_core.runs.dump_dataset import dump_numbers
from gmts_core.runs.logged_tokens import logged_tokens
from gmts_core.runs.report import (
    RunAnalysisPlan,
    analyze_run_shard,
    merge_report,
    prepare_output,
    settings_of,
    trainer_metrics_entry,
    uses_log,
)


@dataclass(frozen=True)
class RunAnalysisRequest:
    """Everything ``analyze-run`` is asked (the CLI flags, typed)."""

    path: Path
    out: Path
    model: str | None = None
    fmt: str | None = None
    steps: str | None = None  # "10:200:10", "3,7" or None (all)
    # the steps written to the dataset with their per-token records: "all", "none" or a spec
    tokens: str | None = "all"
    analysis: AnalysisConfig = AnalysisConfig()  # the knobs each step is analysed with
    reward_kind: str | None = None
    resume: bool = False
    device: str = "auto"
    limits: RunLimits = CLI_LIMITS  # the run files' size budget (larger than the server's)


@dataclass
class RunAnalysisOutcome:
    analysed: int  # steps this process analysed now (resumed ones not counted)
    report: dict[str, Any] | None = None  # the merged report (main process only)
    files: list[Path] = field(default_factory=list)


@dataclass
class Processes:
    """This process's place among the launched ones (1 process without a launcher)."""

    rank: int = 0
    world: int = 1
    device: str | None = None
    _state: Any = None

    @classmethod
    def from_env(cls) -> Processes:
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        from accelerate import PartialState  # only needed when launched on several processes

        # without a GPU accelerate only joins the processes when told to use the CPU
        use_cpu = not torch.cuda.is_available() or os.environ.get("ACCELERATE_USE_CPU", "")
        state = PartialState(cpu=bool(use_cpu))
        device = "cpu" if state.device.type == "cpu" else str(state.device)
        return cls(state.process_index, state.num_processes, device, state)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wait(self) -> None:
        if self._state is not None:
            self._state.wait_for_everyone()


def cli_limits(**overrides: int | None) -> RunLimits:
    """``gmts analyze-run``'s budget: :data:`CLI_LIMITS` with the options given."""
    given: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - set(LIMIT_NAMES)
    if unknown:
        raise ValueError(f"unknown run limits: {sorted(unknown)}")
    return replace(CLI_LIMITS, **given)


def run_analysis(
    req: RunAnalysisRequest,
    models: ModelRegistry,
    on_total: Callable[[int], None] | None = None,
    on_step: Callable[[StepReport | None], None] | None = None,
    processes: Processes | None = None,
) -> RunAnalysisOutcome:
    """Analyse ``req.path`` into ``req.out``; see the module docstring for sharding. The model
    comes from ``models`` (the CLI's registry: an alias, any model folder or hub id, as for
    every CLI command), resolved before anything is written and loaded on this process's
    device."""
    procs = processes or Processes.from_env()
    run = open_run(req.path, req.fmt, req.limits)
    steps = parse_steps(req.steps, run.steps)
    token_steps = (
        set(steps)
        if req.tokens == "all"
        else set(parse_steps(req.tokens, steps))
        if req.tokens and req.tokens != "none"
        else set()
    )
    config = req.analysis
    config.validate()
    plan = RunAnalysisPlan(tuple(steps), frozenset(token_steps), req.reward_kind)
    ref, numbers = None, None
    if not uses_log(run):
        if req.model is None:
            # a dump with its own per-token numbers is reported from them (no model)
            first = logged_tokens(run.step(steps[0]))
            if first is None:
                raise InvalidInputError(
                    f"{req.path}: a {run.format} run needs --model to analyse (its dump logs "
                    "no per-token numbers)"
                )
            # and written as a dataset where they give every model-free selection
            numbers = dump_numbers(first, config) if plan.token_steps else None
            if numbers is None:
                plan = replace(plan, token_steps=frozenset())
        else:
            ref = models.resolve(req.model, any_source=True)
            models.ensure_available(ref)
    settings = settings_of(run, req.model, config, plan, numbers)
    if procs.is_main:
        prepare_output(req.out, settings, req.resume)
    procs.wait()
    lm = None if ref is None else models.load(ref, procs.device or req.device)
    if on_total:
        on_total(len(plan.shard(procs.rank, procs.world)))
    analysed = analyze_run_shard(run, lm, config, plan, req.out, procs.rank, procs.world, on_step)
    procs.wait()
    outcome = RunAnalysisOutcome(analysed)
    if procs.is_main:
        outcome.report = merge_report(req.out, steps, trainer_metrics_entry(run))
        outcome.files = [req.out / "report.json", write_html(req.out, outcome.report)]
    procs.wait()
    return outcome


def write_html(out: Path, report: dict[str, Any]) -> Path:
    path = out / "report.html"
    path.write_text(run_report_html(report), encoding="utf-8")
    return path
