"""Compare selection methods by training: every method from the same start, with the same seeds.

For each seed and each method a fresh policy copy of the base model runs ``steps`` GRPO steps
on batches drawn from the demo task in the config's task mix (:mod:`gmts_core.tasks.mixes`;
step n of seed s draws the same prompts for every method), and its held-out accuracy is
measured every ``eval_every`` steps on one fixed set of held-out problems with common sampling
seeds; every run keeps its final score on each problem, so the final table's intervals come
from t intervals over seeds and problems (:mod:`gmts_core.experiments.compare_stats`).
Curves (mean and std over seeds) and the final table per method come out as a
:class:`CompareResult`; :mod:`app.reports.compare_report` turns it into plotly figures and a
self-contained HTML page.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gmts_core.compare_config import COMPARE_RECIPE as COMPARE_RECIPE
from gmts_core.compare_config import DEFAULT_COMPARE_METHODS as DEFAULT_COMPARE_METHODS
from gmts_core.compare_config import CompareConfig as CompareConfig
from gmts_core.experiments.compare_stats import (
    CompareStatistics,
    compare_statistics,
    conclusion,
    conclusions,
)
from gmts_core.experiments.evaluation import (
    EvalResult,
    demo_batch,
    evaluate_accuracy,
    heldout_problems,
)
from gmts_core.experiments.power import PowerAdvice
from gmts_core.experiments.sessions import step_seed
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.grpo.step import StepResult, grpo_step
from gmts_core.grpo.update import make_optimizer
from gmts_core.model.loading import LoadedModel

logger = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]  # (done, total, label)


@dataclass
class RunCurve:
    """One method trained from one seed."""

    method: str
    seed: int
    reward: list[float] = field(default_factory=list)  # training reward mean, per step
    loss: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    zero_signal_groups: list[int] = field(default_factory=list)
    wasted_share: list[dict[str, float]] = field(default_factory=list)  # per step, per method
    accuracy: dict[int, float] = field(default_factory=dict)  # step -> held-out accuracy
    seconds: float = 0.0
    # the final evaluation's score of each held-out problem (mean reward of its answers), in
    # the held-out set's order; empty in files written before it was kept
    final_per_problem: list[float] = field(default_factory=list)


def _mean_std(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


@dataclass
class CompareResult:
    """All runs, plus their aggregation over seeds (see :meth:`to_dict`)."""

    config: CompareConfig
    model: str
    runs: list[RunCurve]
    start_accuracy: float
    seconds: float
    start_per_problem: list[float] = field(default_factory=list)  # the start model's scores

    def runs_of(self, method: str) -> list[RunCurve]:
        return [r for r in self.runs if r.method == method]

    def curve(self, method: str, key: str) -> list[dict[str, float]]:
        """Mean and std over seeds per step of ``reward``, ``loss`` or ``kl``."""
        rows = [getattr(r, key) for r in self.runs_of(method)]
        return [_mean_std([row[i] for row in rows]) for i in range(len(rows[0]))]

    def accuracy_curve(self, method: str) -> list[dict[str, float]]:
        runs = self.runs_of(method)
        return [
            {"step": s, **_mean_std([r.accuracy[s] for r in runs])}
            for s in self.config.eval_steps()
        ]

    def wasted_curve(self, method: str, of: str | None = None) -> list[dict[str, float]]:
        """Per step, the wasted share of ``of``'s selection (default: the run's own method)."""
        of = of or method
        rows = [[w[of] for w in r.wasted_share] for r in self.runs_of(method)]
        return [_mean_std([row[i] for row in rows]) for i in range(len(rows[0]))]

    def reference_method(self) -> str:
        """The method the others are compared with seed by seed: ``entropy`` when it ran (the
        rule GMTS argues against), else the first method."""
        return "entropy" if "entropy" in self.config.methods else self.config.methods[0]

    def has_per_problem(self) -> bool:
        """Whether every run (and the start) kept its final score on each held-out problem."""
        n = len(self.start_per_problem)
        return n > 0 and all(len(r.final_per_problem) == n for r in self.runs)

    def statistics(self) -> CompareStatistics:
        """The t intervals over seeds and problems of the final table (seeds only for a
        file without per-problem results: each seed's accuracy is then its one "problem")."""
        methods = self.config.methods
        seeds = sorted({r.seed for r in self.runs_of(methods[0])})
        by_key = {(r.method, r.seed): r for r in self.runs}
        if self.has_per_problem():
            finals = [[by_key[m, s].final_per_problem for s in seeds] for m in methods]
            start = np.asarray(self.start_per_problem, dtype=np.float64)
        else:
            steps = self.config.steps
            finals = [[[by_key[m, s].accuracy[steps]] for s in seeds] for m in methods]
            start = np.asarray([self.start_accuracy])
        values = np.asarray(finals, dtype=np.float64)  # (M, S, P)
        return compare_statistics(
            methods,
            values,
            start,
            self.reference_method(),
            self.has_per_problem(),
            answers=self.config.eval_samples,
        )

    def conclusions(self) -> list[str]:
        """One sentence per method against the reference (gmts first): see compare_stats."""
        return conclusions(self.statistics())

    def wasted_summary(self, method: str) -> dict[str, float]:
        """The wasted-share chart's line of ``method`` (its own selection, mean over seeds per
        step) summarised: its mean over steps and its highest point."""
        line = [row["mean"] for row in self.wasted_curve(method)]
        peak = max(range(len(line)), key=line.__getitem__)
        return {"mean": statistics.fmean(line), "peak": line[peak], "peak_step": peak + 1}

    def table(self) -> list[dict[str, Any]]:
        """The final table: one row per method.

        ``final_accuracy`` and ``gain`` (over the start accuracy) are means with 95% t intervals
        over seeds and held-out problems (:mod:`gmts_core.experiments.intervals`);
        ``paired_difference`` is the method's final accuracy minus the reference method's on
        the same seeds and problems, with its interval; ``within_noise`` says that interval
        contains 0 (the two cannot be told apart; None without per-problem scores or with one
        seed, where no verdict is given), ``conclusion`` says it in sentences; ``power`` and
        ``power_observed``: seeds for 80% power at the stated effect and the observed one
        (:mod:`gmts_core.experiments.power`)."""
        stats = self.statistics()
        out = []
        for m, row in zip(self.config.methods, stats.methods, strict=True):
            runs = self.runs_of(m)
            tail = max(1, min(5, self.config.steps))
            final = [r.accuracy[self.config.steps] for r in runs]
            paired = row.paired_difference
            out.append(
                {
                    "method": m,
                    "final_accuracy": {**_mean_std(final), **row.final_accuracy.as_dict()},
                    "gain": row.gain.as_dict(),
                    "reference": stats.reference,
                    "paired_difference": None if paired is None else paired.as_dict(),
                    # no verdict from seeds alone (a file without per-problem scores) nor
                    # from one seed (no seed-to-seed variance)
                    "within_noise": None
                    if paired is None or not stats.verdicts_allowed()
                    else not paired.excludes_zero(),
                    "power": _advice_dict(row.advice),
                    "power_observed": _advice_dict(row.advice_observed),
                    "conclusion": None if paired is None else conclusion(stats, m),
                    "interval_over": "seeds"
                    if not stats.per_problem
                    else "seeds and problems"
                    if stats.verdicts_allowed()
                    else "problems (one seed)",
                    "train_reward_last5": _mean_std(
                        [statistics.fmean(r.reward[-tail:]) for r in runs]
                    ),
                    "wasted_share": self.wasted_summary(m),
                    "seconds": _mean_std([r.seconds for r in runs]),
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        methods = self.config.methods
        return {
            "model": self.model,
            "config": dataclasses.asdict(self.config),
            "start_accuracy": self.start_accuracy,
            "seconds": self.seconds,
            "table": self.table(),
            "conclusions": self.conclusions(),
            "curves": {
                m: {
                    "reward": self.curve(m, "reward"),
                    "loss": self.curve(m, "loss"),
                    "kl": self.curve(m, "kl"),
                    "accuracy": self.accuracy_curve(m),
                    "wasted_share": {
                        of: self.wasted_curve(m, of) for of in self.runs_of(m)[0].wasted_share[0]
                    },
                }
                for m in methods
            },
            "runs": [dataclasses.asdict(r) for r in self.runs],
            "start_per_problem": self.start_per_problem,
        }


def _advice_dict(advice: PowerAdvice | None) -> dict[str, Any] | None:
    return None if advice is None else dataclasses.asdict(advice)


def _evaluate(
    policy_model: Any, base: LoadedModel, problems: list[RLPrompt], step: int, c: CompareConfig
) -> EvalResult:
    """Held-out accuracy with a sampling seed that depends only on the step (common numbers)."""
    return evaluate_accuracy(
        policy_model,
        base.tokenizer,
        problems,
        temperature=c.eval_temperature,
        samples_per_problem=c.eval_samples,
        max_new_tokens=c.rl.max_new_tokens,
        seed=c.eval_seed + step,
    )


def run_steps(
    base: LoadedModel, method: str, seed: int, config: CompareConfig
) -> Iterator[tuple[int, StepResult, TrainablePolicy]]:
    """The GRPO steps of one run (``method`` from ``seed``), one at a time: (step number, its
    result, the policy after it). Each step's batch and seed depend only on ``seed`` and the step,
    so every method sees the same batches."""
    rl = config.run_config(method)
    policy = TrainablePolicy(base, config.policy)
    optimizer = make_optimizer(policy, rl)
    for step in range(1, config.steps + 1):
        s = step_seed(seed, step - 1)
        batch = demo_batch(rl.prompts_per_step, s, mix=config.task_mix)
        yield step, grpo_step(policy, optimizer, batch, rl, s, step), policy


def train_run(
    base: LoadedModel,
    method: str,
    seed: int,
    config: CompareConfig,
    problems: list[RLPrompt],
    start_accuracy: float,
    tick: Callable[[str], None] = lambda _label: None,
) -> RunCurve:
    """One method from one seed: ``steps`` GRPO steps with evaluations along the way."""
    start = time.perf_counter()
    run = RunCurve(method, seed, accuracy={0: start_accuracy})
    evals = set(config.eval_steps())
    for step, result, policy in run_steps(base, method, seed, config):
        m = result.metrics
        run.reward.append(m.reward_mean)
        run.loss.append(m.loss)
        run.kl.append(m.kl)
        run.zero_signal_groups.append(m.num_zero_signal_groups)
        run.wasted_share.append(dict(m.wasted_share))
        if step in evals:
            evaluation = _evaluate(policy.model, base, problems, step, config)
            run.accuracy[step] = evaluation.accuracy
            if step == config.steps:
                run.final_per_problem = evaluation.per_problem
        tick(f"{method} seed {seed} step {step}: reward {m.reward_mean:.2f}")
    run.seconds = time.perf_counter() - start
    return run


def run_compare(
    base: LoadedModel, config: CompareConfig | None = None, progress: Progress | None = None
) -> CompareResult:
    """Train every method from every seed (same start, same batches) and aggregate."""
    config = config or CompareConfig()
    config.validate()
    began = time.perf_counter()
    problems = heldout_problems(config.eval_problems)
    start = _evaluate(base.model, base, problems, 0, config)
    start_accuracy = start.accuracy
    total = config.steps * config.seeds * len(config.methods)
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    runs = [
        train_run(base, method, seed, config, problems, start_accuracy, tick)
        for seed in range(config.seed_offset, config.seed_offset + config.seeds)
        for method in config.methods
    ]
    logger.info("compared %d methods x %d seeds", len(config.methods), config.seeds)
    seconds = time.perf_counter() - began
    return CompareResult(config, base.name, runs, start_accuracy, seconds, start.per_problem)
