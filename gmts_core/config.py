"""The algorithm knobs, in one place: an analysis (:class:`AnalysisConfig`) and a GRPO step
(:class:`RLConfig`) with the demo's recipes.
Plain frozen dataclasses with ``validate()``. Each knob is documented once, as a
:func:`gmts_core.knobs.knob` (default, help, bounds); the app's request models, UI forms and CLI
options take their help, bounds and defaults from here.

This module imports no torch: the method registry (:mod:`gmts_core.methods`) is asked only when a
config is validated, so ``gmts <command> --help`` reads the knobs without the model stack (the
other torch-free configs are in :mod:`gmts_core.base_config` and
:mod:`gmts_core.compare_config`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gmts_core.bounds import MAX_SEED, MIN_RATIO, MIN_TEMPERATURE
from gmts_core.errors import InvalidInputError
from gmts_core.knobs import (
    DEFAULT_RATIO,
    DEFAULT_SCOPE,
    DEFAULT_TEMPERATURE,
    SCOPES,
    knob,
)

if TYPE_CHECKING:
    from gmts_core.model.loading import LoadedModel


def registered_methods() -> list[str]:
    """The registered selection methods' names (the registry is in :mod:`gmts_core.methods`, which
    imports torch: asked only when a config is validated, so its knobs are read without it)."""
    from gmts_core.methods.selection import list_methods

    return list_methods()


DEFAULT_METHODS = ("entropy", "gmts", "gmts_entropy", "gmts_paper", "surprisal", "random", "all")
"""The selection methods an analysis reports when the caller names none."""


@dataclass(frozen=True)
class AnalysisConfig:
    """Algorithm knobs of an analysis (:func:`gmts_core.analysis.analyze.analyze`)."""

    temperature: float = knob(
        DEFAULT_TEMPERATURE,
        "Sampling temperature and tau of the token statistics, pi = softmax(z / tau) "
        "(at least 0.001).",
        ge=MIN_TEMPERATURE,
        le=100,
    )
    advantage: str = knob("grpo", "Advantage estimator: grpo | dr_grpo | rloo.")
    loss_aggregation: str = knob(
        "token_mean",
        "Loss aggregation, the answer weight w_i: token_mean | seq_mean_token_mean | "
        "seq_mean_token_sum_norm.",
    )
    ratio: float = knob(
        DEFAULT_RATIO,
        "Share of tokens each method selects (k = ceil(ratio * N)).",
        ge=MIN_RATIO,
        le=1,
    )
    scope: str = knob(
        DEFAULT_SCOPE,
        "Which tokens compete for the top-k places: batch (all together), group or answer.",
    )
    methods: tuple[str, ...] = knob(DEFAULT_METHODS, "Selection methods to compare.")
    budget_over: str = knob(
        "trained",
        "What the budget k = ceil(ratio * n) counts: trained (the tokens the trainer's loss "
        "counts), content (those less the tokenizer's special tokens: chat-template markers, "
        "EOS) or all (every answer token; untrained ones still never selected).",
    )
    top_alternatives: int = knob(5, "Most likely alternatives listed per token.", ge=0, le=100)
    seed: int = knob(0, "Seed of the random method's scores.", ge=0, le=MAX_SEED)
    chat_template: bool = knob(False, "Wrap prompts in the tokenizer's chat template.")
    include_grad_head: bool = knob(
        False, "Also compute grad_head, the LM-head weight-gradient norm of each token."
    )
    chunk_size: int = knob(128, "Positions per chunk of the vocabulary-wide statistics.", ge=1)
    answer_special_tokens: bool = knob(
        False,
        "Given answers: read special-token strings such as '<eos>' as control tokens. By "
        "default answers are plain text and their token texts join back to them.",
    )
    # the coefficient omega_t = A + beta (pi_ref / pi - 1) is taken against the policy's
    # reference (LoadedModel.reference: a session's starting policy)
    beta: float | None = knob(
        None,
        "KL weight of the effective coefficient; none: the policy's own training beta (0 for a "
        "plain model).",
        ge=0,
    )

    def beta_for(self, lm: LoadedModel) -> float:
        return lm.reference_beta if self.beta is None else self.beta

    def validate(self) -> None:
        from gmts_core.methods.budget import check_budget_over  # the methods import torch

        if not MIN_TEMPERATURE <= self.temperature < float("inf"):
            raise InvalidInputError(
                f"temperature must be at least {MIN_TEMPERATURE:g} for token statistics "
                f"(pi = softmax(z / tau) and 1/tau overflow as tau -> 0), got {self.temperature!r}"
            )
        if not MIN_RATIO <= self.ratio <= 1:
            raise InvalidInputError(
                f"ratio must be in [{MIN_RATIO:g}, 1] (smaller ratios select no token: "
                f"k = ceil(ratio * N) = 0), got {self.ratio}"
            )
        if self.scope not in SCOPES:
            raise InvalidInputError(f"unknown scope {self.scope!r}; valid: {', '.join(SCOPES)}")
        check_budget_over(self.budget_over)
        valid = registered_methods()
        for m in self.methods:
            if m not in valid:
                raise InvalidInputError(
                    f"unknown selection method {m!r}; valid: {', '.join(valid)}"
                )
        if not self.methods:
            raise InvalidInputError("at least one selection method is needed")
        if self.beta is not None and not 0 <= self.beta < float("inf"):
            raise InvalidInputError(f"beta must be >= 0, got {self.beta}")


@dataclass(frozen=True)
class RLConfig:
    """Every knob of a GRPO step (defaults tuned on the demo model; see benchmarks/rl_gain.py)."""

    method: str = knob("gmts", "Selection method whose mask the loss uses.")
    ratio: float = knob(
        DEFAULT_RATIO, "Share of answer tokens selected (k = ceil(ratio * N)).", ge=MIN_RATIO, le=1
    )
    scope: str = knob(
        DEFAULT_SCOPE,
        "Selection scope: batch | group | answer (left out with a method given: the method's "
        "default, group for gmts_paper and gmts_paper_verl as in the paper, batch for the others).",
    )
    group_size: int = knob(8, "Answers sampled per prompt (G).", ge=2, le=64)
    prompts_per_step: int = knob(8, "Prompts per step (drawn from the demo task).", ge=1, le=64)
    learning_rate: float = knob(
        1e-4, "Peak learning rate (stable on the demo model even with small batches).", ge=0, le=1
    )
    warmup_steps: int = knob(
        0, "Linear learning-rate warmup over the first steps.", ge=0, le=10_000
    )
    decay_steps: int = knob(
        0,
        "Cosine decay of the learning rate to 0 over this many steps after the warm-up "
        "(0: none, the rate stays at its peak).",
        ge=0,
        le=100_000,
    )
    inner_steps: int = knob(1, "Optimizer updates per sampled batch (PPO epochs).", ge=1, le=16)
    epsilon_low: float = knob(0.2, "PPO clip range below 1.", ge=0, le=1)
    epsilon_high: float = knob(0.28, "PPO clip range above 1 (DAPO's clip-higher).", ge=0, le=10)
    beta: float = knob(0.0, "Weight of the k3 KL term to the starting policy.", ge=0, le=100)
    max_grad_norm: float = knob(1.0, "Gradient-norm clipping.", gt=0, le=1e6)
    weight_decay: float = knob(0.0, "Weight decay of the optimizer.", ge=0, le=1)
    optimizer: str = knob("adamw", "adamw | sgd.")
    adam_betas: tuple[float, float] = knob((0.9, 0.99), "AdamW's betas.")
    adam_epsilon: float = knob(
        1e-8, "AdamW's epsilon (larger values damp parameters with tiny gradients)."
    )
    temperature: float = knob(
        DEFAULT_TEMPERATURE,
        "Sampling temperature and tau of the loss's log-probs (at least 0.001).",
        ge=MIN_TEMPERATURE,
        le=10,
    )
    top_p: float = knob(1.0, "Nucleus sampling.", gt=0, le=1)
    max_new_tokens: int = knob(48, "Longest sampled answer (tokens).", ge=1, le=4096)
    advantage: str = knob("grpo", "Advantage estimator: grpo | dr_grpo | rloo.")
    loss_aggregation: str = knob("token_mean", "Loss aggregation of the token terms.")
    chat_template: bool = knob(False, "Wrap prompts in the tokenizer's chat template.")
    measure_kl: bool = knob(True, "Report KL even when beta is 0 (one more forward pass).")
    measure_logprob_after: bool = knob(
        False,
        "Also measure each token's log-prob after the update (one more forward pass per step); "
        "off unless asked, on in the UI's Train tab.",
    )
    logprob_after_prompts: int = knob(
        0,
        "With measure_logprob_after: measure it on the answers of the batch's first this many "
        "prompts only, a pass over those answers alone (0: every prompt). The other tokens' "
        "log-prob after is not measured (null), and the Δlog p means cover the measured tokens; "
        "the Train tab measures the prompts it draws.",
        ge=0,
    )
    max_batch_tokens: int = knob(8192, "Padded tokens per forward/backward micro-batch.", ge=1)
    fused_max_tokens: int = knob(
        8192,
        "Batches of at most this many padded tokens take their token statistics from the first "
        "update's training forward, whose graphs are held until the selection is known (memory: "
        "one training forward over all those tokens); larger ones take them from the sampling "
        "itself (the logits each token was drawn from), collected when a step's answers could "
        "exceed it.",
        ge=0,
    )
    report_methods: tuple[str, ...] = knob(
        ("entropy", "gmts"), "Methods whose wasted share etc. are reported too."
    )
    reselect: bool = knob(
        False,
        "Re-select the training tokens before every inner update after the first, by "
        "gamma = w |omega| g at the current policy (ratio, clip and KL in omega); default false: "
        "the selection made at sampling is kept for all inner updates, as TRL does.",
    )

    def validate(self) -> None:
        if self.method not in registered_methods():
            raise InvalidInputError(
                f"unknown selection method {self.method!r}; "
                f"valid: {', '.join(registered_methods())}"
            )
        checks = [
            (
                MIN_TEMPERATURE <= self.temperature < float("inf"),
                f"temperature must be at least {MIN_TEMPERATURE:g} for RL (sampling, log-probs)",
            ),
            (self.group_size >= 2, "group_size must be >= 2 (advantages compare answers)"),
            (self.prompts_per_step >= 1, "prompts_per_step must be >= 1"),
            (self.inner_steps >= 1, "inner_steps must be >= 1"),
            (self.learning_rate >= 0, "learning_rate must be >= 0"),
            (self.warmup_steps >= 0, "warmup_steps must be >= 0"),
            (self.decay_steps >= 0, "decay_steps must be >= 0"),
            (self.optimizer in ("adamw", "sgd"), "optimizer must be adamw or sgd"),
            (self.epsilon_low >= 0 and self.epsilon_high >= 0, "epsilons must be >= 0"),
            (self.beta >= 0, "beta must be >= 0"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (self.max_new_tokens >= 1, "max_new_tokens must be >= 1"),
            (self.max_batch_tokens >= 1, "max_batch_tokens must be >= 1"),
            (self.fused_max_tokens >= 0, "fused_max_tokens must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidInputError(message)
        self.analysis_config(0).validate()

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of step ``step`` (1-based): linear warmup over ``warmup_steps``,
        then the peak, or with ``decay_steps`` a cosine from the peak down to 0: step
        ``warmup_steps + d`` has ``peak * (1 + cos(pi * d / (decay_steps + 1))) / 2``, so the
        last decayed step still moves the model a little and every later one has 0.

        Adam's first updates move every parameter by about the learning rate whatever its
        gradient, which a small, sharp model does not survive at full rate.
        """
        step = max(step, 1)
        if step <= self.warmup_steps:
            return self.learning_rate * step / self.warmup_steps
        if self.decay_steps <= 0:
            return self.learning_rate
        done = min(step - self.warmup_steps, self.decay_steps + 1) / (self.decay_steps + 1)
        return self.learning_rate * 0.5 * (1.0 + math.cos(math.pi * done))

    def selection_methods(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.method, *self.report_methods)))

    def analysis_config(self, seed: int) -> AnalysisConfig:
        """The analysis a step selects its tokens with: the knobs both configs name alike (beta
        included: the first update's coefficient has the KL term), this step's methods."""
        shared = {name: getattr(self, name) for name in SHARED_KNOBS}
        return AnalysisConfig(
            **shared, methods=self.selection_methods(), top_alternatives=0, seed=seed
        )


SHARED_KNOBS = (
    "temperature",
    "advantage",
    "loss_aggregation",
    "ratio",
    "scope",
    "chat_template",
    "beta",
)
"""The knobs :class:`RLConfig` hands to the :class:`AnalysisConfig` of its steps, same name."""


DEMO_RECIPE = RLConfig(
    prompts_per_step=64,
    inner_steps=4,
    learning_rate=1.5e-4,
    warmup_steps=5,
    fused_max_tokens=65536,  # the demo model's graphs of a whole 512-answer batch: ~0.3 GB
)
"""The GRPO recipe that teaches the bundled demo model (see ``benchmarks/rl_gain.py``).

The demo model's mistakes include +-1 slips on digits. In a small batch, the counts of +1 and -1
slips among the wrong answers differ by chance, and pushing down the sampled slips then shifts
every digit prediction up or down at once: a direction the model is very sensitive to, along
which one AdamW step at lr 3e-4 on 8 prompts halves the accuracy. 64 prompts a step (512 answers)
average that noise out; 4 updates per batch (clipped, PPO-style) make the most of each batch.
"""

CLASS_RECIPE = RLConfig(
    prompts_per_step=32, learning_rate=1.5e-4, inner_steps=1, warmup_steps=5, max_new_tokens=48
)
"""The demo recipe at a classroom's pace (the UI's Train and Compare tabs): 32 prompts x G = 8
a step, one update per batch, the same learning rate and warm-up; it gains about 10-16 points of
held-out accuracy in 10-20 steps (docs/benchmarks.md, "The Train tab's defaults")."""
