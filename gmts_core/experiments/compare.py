"""Compare selection methods by training: every method from the same start, with the same seeds.

For each seed and each method a fresh policy copy of the base model runs ``steps`` GRPO steps
on batches drawn from the demo task (step n of seed s draws the same prompts for every
method), and its held-out accuracy is measured every ``eval_every`` steps on one fixed set of
held-out problems with common sampling seeds. Curves (mean and std over seeds) and a final
table per method come out as a :class:`CompareResult`; :mod:`gmts_core.compare_report` turns
it into plotly figures and a self-contained HTML page.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError
from gmts_core.experiments.evaluation import demo_batch, evaluate_accuracy, heldout_problems
from gmts_core.experiments.sessions import step_seed
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.step import DEMO_RECIPE, RLPrompt, grpo_step, make_optimizer
from gmts_core.knobs import knob, knob_factory
from gmts_core.methods.selection import list_methods
from gmts_core.modeling import LoadedModel

logger = logging.getLogger(__name__)

DEFAULT_COMPARE_METHODS = ("all", "entropy", "gmts", "gmts_entropy", "random")
# The demo recipe at half the batch and half the updates: 10 runs of 20 steps fit in about
# 10 minutes on 2 CPU cores, and every method but `random` still learns visibly.
COMPARE_RECIPE = dataclasses.replace(DEMO_RECIPE, prompts_per_step=32, inner_steps=2)
Progress = Callable[[int, int, str], None]  # (done, total, label)


@dataclass(frozen=True)
class CompareConfig:
    """What to compare and how long (defaults: about 10 minutes on 2 CPU cores)."""

    methods: tuple[str, ...] = knob(
        DEFAULT_COMPARE_METHODS, "Selection methods trained side by side."
    )
    ratio: float = knob(0.2, "Share of answer tokens each method trains on.", gt=0, le=1)
    steps: int = knob(20, "GRPO steps per run.", ge=1, le=10_000)
    seeds: int = knob(2, "Runs per method (seeds 0, 1, ...: same start and batches).", ge=1, le=100)
    eval_every: int = knob(10, "Evaluate held-out accuracy every this many steps.", ge=1)
    eval_problems: int = knob(200, "Held-out problems per evaluation.", ge=1, le=100_000)
    eval_samples: int = knob(1, "Answers per held-out problem.", ge=1, le=64)
    eval_temperature: float = knob(1.0, "Temperature of the evaluation (0: greedy).", ge=0, le=10)
    rl: RLConfig = knob(
        COMPARE_RECIPE, "The GRPO recipe of every run (its method and ratio are set per run)."
    )
    policy: PolicySettings = knob_factory(
        lambda: PolicySettings(kind="full"), "How each run's trainable copy is made."
    )

    def validate(self) -> None:
        if not self.methods:
            raise InvalidInputError("give at least one method to compare")
        for m in self.methods:
            if m not in list_methods():
                raise InvalidInputError(
                    f"unknown selection method {m!r}; valid: {', '.join(list_methods())}"
                )
        if self.steps < 1 or self.seeds < 1 or self.eval_every < 1 or self.eval_problems < 1:
            raise InvalidInputError("steps, seeds, eval_every and eval_problems must be >= 1")
        self.run_config(self.methods[0]).validate()

    def run_config(self, method: str) -> RLConfig:
        report = tuple(dict.fromkeys(("entropy", "gmts", *self.rl.report_methods)))
        return dataclasses.replace(self.rl, method=method, ratio=self.ratio, report_methods=report)

    def eval_steps(self) -> list[int]:
        points = {0, self.steps, *range(self.eval_every, self.steps, self.eval_every)}
        return sorted(points)


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


CONFIDENCE = 0.95  # of the intervals in the final table


def _mean_std(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def mean_interval(values: list[float], confidence: float = CONFIDENCE) -> dict[str, float | None]:
    """Mean, std and the Student-t confidence interval of the mean over seeds
    (mean -+ t_{(1+c)/2, n-1} std / sqrt(n)); with one seed the interval is undefined (None)."""
    from scipy.stats import t as student_t  # scipy.stats: ~1 s to import, only for intervals

    out: dict[str, float | None] = dict(_mean_std(values))
    n = len(values)
    if n < 2:
        return {**out, "ci_low": None, "ci_high": None}
    mean, std = statistics.fmean(values), statistics.stdev(values)
    half = float(student_t.ppf((1 + confidence) / 2, n - 1)) * std / math.sqrt(n)
    return {**out, "ci_low": mean - half, "ci_high": mean + half}


def within_noise(interval: dict[str, float | None]) -> bool:
    """Whether a paired difference's interval contains 0 (or is undefined: one seed)."""
    lo, hi = interval["ci_low"], interval["ci_high"]
    return lo is None or hi is None or lo <= 0.0 <= hi


@dataclass
class CompareResult:
    """All runs, plus their aggregation over seeds (see :meth:`to_dict`)."""

    config: CompareConfig
    model: str
    runs: list[RunCurve]
    start_accuracy: float
    seconds: float

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

    def final_by_seed(self, method: str) -> dict[int, float]:
        return {r.seed: r.accuracy[self.config.steps] for r in self.runs_of(method)}

    def table(self) -> list[dict[str, Any]]:
        """The final table: one row per method, mean, std and a 95% interval over seeds.

        ``paired_difference`` is the method's final accuracy minus the reference method's, seed
        by seed (same start, same batches, same held-out sampling seeds), with its interval;
        ``within_noise`` says that interval contains 0: the two cannot be told apart.
        """
        out = []
        ref = self.reference_method()
        ref_final = self.final_by_seed(ref)
        for m in self.config.methods:
            runs = self.runs_of(m)
            final = [r.accuracy[self.config.steps] for r in runs]
            tail = max(1, min(5, self.config.steps))
            mine = self.final_by_seed(m)
            diffs = [mine[s] - ref_final[s] for s in sorted(mine) if s in ref_final]
            paired = mean_interval(diffs) if m != ref and diffs else None
            out.append(
                {
                    "method": m,
                    "final_accuracy": mean_interval(final),
                    "gain": mean_interval([f - self.start_accuracy for f in final]),
                    "reference": ref,
                    "paired_difference": paired,
                    "within_noise": within_noise(paired) if paired is not None else None,
                    "train_reward_last5": _mean_std(
                        [statistics.fmean(r.reward[-tail:]) for r in runs]
                    ),
                    "wasted_share_first": _mean_std([r.wasted_share[0][m] for r in runs]),
                    "wasted_share_last": _mean_std([r.wasted_share[-1][m] for r in runs]),
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
        }


def _evaluate(
    policy_model: Any, base: LoadedModel, problems: list[RLPrompt], step: int, c: CompareConfig
) -> float:
    """Held-out accuracy with a sampling seed that depends only on the step (common numbers)."""
    return evaluate_accuracy(
        policy_model,
        base.tokenizer,
        problems,
        temperature=c.eval_temperature,
        samples_per_problem=c.eval_samples,
        max_new_tokens=c.rl.max_new_tokens,
        seed=10_000 + step,
    ).accuracy


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
    rl = config.run_config(method)
    policy = TrainablePolicy(base, config.policy)
    optimizer = make_optimizer(policy, rl)
    run = RunCurve(method, seed, accuracy={0: start_accuracy})
    evals = set(config.eval_steps())
    for step in range(1, config.steps + 1):
        s = step_seed(seed, step - 1)
        result = grpo_step(policy, optimizer, demo_batch(rl.prompts_per_step, s), rl, s, step)
        m = result.metrics
        run.reward.append(m.reward_mean)
        run.loss.append(m.loss)
        run.kl.append(m.kl)
        run.zero_signal_groups.append(m.num_zero_signal_groups)
        run.wasted_share.append(dict(m.wasted_share))
        if step in evals:
            run.accuracy[step] = _evaluate(policy.model, base, problems, step, config)
        tick(f"{method} seed {seed} step {step}: reward {m.reward_mean:.2f}")
    run.seconds = time.perf_counter() - start
    return run


def run_compare(
    base: LoadedModel, config: CompareConfig | None = None, progress: Progress | None = None
) -> CompareResult:
    """Train every method from every seed (same start, same batches) and aggregate."""
    config = config or CompareConfig()
    config.validate()
    start = time.perf_counter()
    problems = heldout_problems(config.eval_problems)
    start_accuracy = _evaluate(base.model, base, problems, 0, config)
    total = config.steps * config.seeds * len(config.methods)
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    runs = [
        train_run(base, method, seed, config, problems, start_accuracy, tick)
        for seed in range(config.seeds)
        for method in config.methods
    ]
    logger.info("compared %d methods x %d seeds", len(config.methods), config.seeds)
    return CompareResult(config, base.name, runs, start_accuracy, time.perf_counter() - start)
