"""Analyse a training run step by step: per-step summaries and per-token records.

:func:`analyze_step` turns one :class:`~gmts_core.runs.base.RunStep` into the groups of
:func:`gmts_core.analysis.analyze.analyze` (all groups of the step in one batch, as the trainer saw
them) and condenses the result into a :class:`StepReport`: reward mean/std, share of
zero-signal groups, each method's gradient coverage and wasted share, overlaps, Spearman of
entropy and gradient proxy, mean answer length. :func:`logged_step_report` does the same from
a trainer log's own numbers (no model: what was actually applied). Per-token records are
written by :mod:`gmts_core.run_dataset`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, RewardSpec, analyze
from gmts_core.analysis.difference_reasons import (
    ZERO_SIGNAL,
    DifferenceInputs,
    Differences,
    explain,
)
from gmts_core.analysis.records import AnalysisResult
from gmts_core.analysis.summaries import (
    gradient_coverage,
    overlap,
    spearman_by_answer,
    wasted_share,
)
from gmts_core.errors import InvalidInputError
from gmts_core.model.loading import LoadedModel
from gmts_core.runs.base import RunGroup, RunStep
from gmts_core.runs.logged_tokens import compare_with_analysis, logged_tokens, numbers_note
from gmts_core.runs.token_samples import trained_mask

_STEPS_RX = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*(?::\s*(\d+))?\s*$")


def parse_steps(spec: str | None, available: Sequence[int]) -> list[int]:
    """The steps of ``available`` that ``spec`` asks for.

    ``None``/``""``: all; ``"10:200:10"``: 10, 20, ... 200 (both ends included, either may be
    left out: ``":50"``, ``"100:"``); ``"3,7,9"``: those steps. Unknown steps are an error.
    """
    if not spec or not spec.strip():
        return list(available)
    have = set(available)
    if m := _STEPS_RX.match(spec):
        start = int(m.group(1)) if m.group(1) else min(available)
        stop = int(m.group(2)) if m.group(2) else max(available)
        stride = int(m.group(3) or 1)
        if stride < 1:
            raise InvalidInputError(f"--steps {spec!r}: the stride must be >= 1")
        chosen = [s for s in available if start <= s <= stop and (s - start) % stride == 0]
    else:
        try:
            wanted = [int(p) for p in spec.split(",") if p.strip()]
        except ValueError:
            raise InvalidInputError(
                f"--steps {spec!r}: use START:STOP[:STRIDE] or a comma-separated list"
            ) from None
        missing = [s for s in wanted if s not in have]
        if missing:
            raise InvalidInputError(f"--steps: the run has no step {missing[0]}")
        chosen = [s for s in available if s in set(wanted)]
    if not chosen:
        raise InvalidInputError(f"--steps {spec!r} selects none of the run's steps")
    return chosen


@dataclass
class StepReport:
    """The per-step row of a run report (JSON-safe: None where a number is undefined)."""

    step: int
    source: str
    num_groups: int
    num_answers: int
    num_tokens: int
    reward_mean: float | None
    reward_std: float | None  # population std over the step's answers
    zero_signal_share: float  # share of groups whose rewards are all equal (advantage 0)
    mean_answer_length: float  # tokens
    selected_count: dict[str, int]
    gradient_coverage: dict[str, float]
    wasted_share: dict[str, float]
    overlap: dict[str, float]  # Jaccard index per pair "a|b"
    spearman_batch: float | None
    spearman_within_answer_median: float | None
    mode: str = "analysis"  # "analysis" (recomputed with a model) or "logged" (trainer log)
    extra: dict[str, Any] = field(default_factory=dict)
    # mean entropy (nats) over the step's answer tokens: what a trainer logs as its entropy
    entropy_mean: float | None = None
    # answer tokens the trainer's loss did not count (loss mask 0): in no figure above
    untrained_tokens: int = 0
    # which per-token numbers are logged (the dump's) and which recomputed (the model's)
    numbers: dict[str, str] = field(default_factory=dict)
    # mean |logged - recomputed| over trained tokens (entropy, trainer_logprob), with a model
    logged_vs_recomputed: dict[str, float | None] = field(default_factory=dict)
    # train/inference mismatch (gmts_core.runs.logged_tokens.mismatch_summary); None: the dump
    # has no inference log-probs
    mismatch: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def group_input(group: RunGroup, reward_kind: str | None, tokenizer: Any = None) -> GroupInput:
    """The analysis input of a run group: rewards from the file, else the rule ``reward_kind``
    applied to the group's reference. A group stored as token ids (``texts_from_ids``) is
    analysed on its answers' ids as given, its prompt decoded by ``tokenizer``."""
    prompt, answer_ids = group.prompt, None
    answers: list[str] | None = list(group.answers)
    if group.texts_from_ids:
        prompt, answer_ids = _prompt_from_ids(group, tokenizer), group.token_ids
        answers = None
    trained = trained_mask(group)
    if trained is not None and answer_ids is None:
        answer_ids = group.token_ids  # a mask holds one flag per token of these ids
        answers = None if answer_ids is not None else answers
    advantages = list(group.advantages) if group.advantages is not None else None
    if group.rewards is not None and not any(math.isnan(r) for r in group.rewards):
        return GroupInput(
            prompt,
            answers,
            rewards=list(group.rewards),
            answer_ids=answer_ids,
            advantages=advantages,
            trained=trained,
        )
    if advantages is not None and not any(math.isnan(a) for a in advantages):
        # the trainer's advantages, its rewards not told by the file (or partly abstained)
        return GroupInput(
            prompt, answers, answer_ids=answer_ids, advantages=advantages, trained=trained
        )
    kind = group.extra.get("reward_kind", [reward_kind])[0] or reward_kind
    if kind is None:
        raise InvalidInputError(
            f"{group.source}: the file has no rewards for this group; pass a reward rule "
            "(--reward KIND) to recompute them from its reference"
        )
    if group.reference is None:
        raise InvalidInputError(
            f"{group.source}: no rewards and no reference to score the answers against"
        )
    return GroupInput(
        prompt,
        answers,
        reward=RewardSpec(kind, group.reference),
        answer_ids=answer_ids,
        trained=trained,
    )


def _prompt_from_ids(group: RunGroup, tokenizer: Any) -> str:
    """The prompt of a group stored as token ids, decoded (special tokens kept: a chat
    template's markers tokenize back to themselves)."""
    ids = group.prompt_token_ids or []
    if tokenizer is None:
        raise InvalidInputError(
            f"{group.source}: the run stores token ids only; a model's "
            "tokenizer is needed to read its prompts"
        )
    size = len(tokenizer)
    outside = next((t for t in ids if not 0 <= t < size), None)
    if outside is not None:
        raise InvalidInputError(
            f"{group.source}: prompt token id {outside} is not in the vocabulary of the model's "
            f"tokenizer ({size} tokens): a run of another model?"
        )
    return str(tokenizer.decode(ids, skip_special_tokens=False))


def analyze_step(
    lm: LoadedModel, step: RunStep, config: AnalysisConfig, reward_kind: str | None = None
) -> tuple[StepReport, AnalysisResult]:
    """Analyse all groups of ``step`` as one batch; its report row and the full result."""
    if not step.groups:
        raise InvalidInputError(f"{step.source}: step {step.step} has no groups")
    groups = [group_input(g, reward_kind, lm.tokenizer) for g in step.groups]
    chat = any(g.chat for g in step.groups) and bool(getattr(lm.tokenizer, "chat_template", None))
    result = analyze(lm, groups, replace(config, chat_template=chat or config.chat_template))
    report = report_from_result(step, result)
    tokens = logged_tokens(step)
    report.numbers = numbers_note(tokens, recomputed=True)
    if tokens is not None:
        report.logged_vs_recomputed, report.mismatch = compare_with_analysis(tokens, result)
    return report, result


def report_from_result(step: RunStep, result: AnalysisResult) -> StepReport:
    s = result.summary
    rewards = [a.reward for _, a in result.iter_answers()]
    lengths = [a.length for _, a in result.iter_answers()]
    rho = s["spearman_entropy_grad"]
    return StepReport(
        step=step.step,
        source=step.source,
        num_groups=s["num_groups"],
        num_answers=len(rewards),
        num_tokens=s["num_tokens"],
        reward_mean=_mean(rewards),
        reward_std=_std(rewards),
        zero_signal_share=s["num_zero_signal_groups"] / max(s["num_groups"], 1),
        mean_answer_length=sum(lengths) / max(len(lengths), 1),
        selected_count=dict(s["selected_count"]),
        gradient_coverage=dict(s["gradient_coverage"]),
        wasted_share=dict(s["wasted_share"]),
        overlap={pair: o["jaccard"] for pair, o in s["overlap"].items()},
        spearman_batch=rho["batch"],
        spearman_within_answer_median=rho["within_answer_median"],
        entropy_mean=_token_mean(result),
        untrained_tokens=s.get("num_untrained_tokens", 0),
    )


def _token_mean(result: AnalysisResult) -> float | None:
    """The mean entropy over the answer tokens the trainer's loss counted (None: none)."""
    x = result.inputs
    if x is None:
        return None
    entropy = x.entropy if x.trained is None else x.entropy[x.trained]  # the trained tokens
    return float(entropy.double().mean()) if entropy.numel() else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: list[float]) -> float | None:
    if not values:
        return None
    mu = sum(values) / len(values)
    return math.sqrt(sum((v - mu) ** 2 for v in values) / len(values))


LOGGED_METHODS = {"applied": "selected", "entropy": "selected_entropy", "gmts": "selected_gmts"}


def logged_step_report(step: RunStep) -> StepReport:
    """The report row of a trainer-log step from the logged numbers: ``applied`` is the mask
    the loss was multiplied by; ``entropy`` and ``gmts`` what those methods would have kept."""
    groups = step.groups
    if not groups or not groups[0].token_columns:
        raise InvalidInputError(f"{step.source}: not a trainer log step (no per-token columns)")

    def cat(column: str, dtype: torch.dtype) -> torch.Tensor:
        values = [v for g in groups for answer in g.token_columns[column] for v in answer]
        return torch.tensor(values, dtype=dtype)

    proxy, entropy = cat("grad_proxy", torch.float64), cat("entropy", torch.float64)
    lengths = [len(ids) for g in groups for ids in (g.token_ids or [])]
    answer_index = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    masks = {m: cat(col, torch.bool) for m, col in LOGGED_METHODS.items()}
    zero = sum(all(a == 0 for a in (g.advantages or [0.0])) for g in groups)
    rho = spearman_by_answer(entropy, proxy, answer_index)
    names = list(masks)
    return StepReport(
        step=step.step,
        source=step.source,
        num_groups=len(groups),
        num_answers=len(lengths),
        num_tokens=int(proxy.numel()),
        reward_mean=None,
        reward_std=None,
        zero_signal_share=zero / len(groups),
        mean_answer_length=sum(lengths) / max(len(lengths), 1),
        selected_count={m: int(v.sum()) for m, v in masks.items()},
        gradient_coverage={m: gradient_coverage(proxy, v) for m, v in masks.items()},
        wasted_share={m: wasted_share(proxy, v) for m, v in masks.items()},
        overlap={
            f"{a}|{b}": overlap(masks[a], masks[b])["jaccard"]
            for i, a in enumerate(names)
            for b in names[i + 1 :]
        },
        spearman_batch=rho["batch"],
        spearman_within_answer_median=rho["within_answer_median"],
        mode="logged",
        extra={"method": groups[0].extra.get("method", [None])[0]},
        entropy_mean=float(entropy.mean()) if entropy.numel() else None,
    )


def logged_differences(step: RunStep) -> list[Differences]:
    """Why the logged selections differ (``applied``, ``entropy``, ``gmts``: every pair), from
    the trainer log's own per-token numbers (|omega| where logged, else |A| on-policy)."""
    groups = step.groups
    if not groups or not groups[0].token_columns:
        raise InvalidInputError(f"{step.source}: not a trainer log step (no per-token columns)")
    cols: dict[str, list[float]] = {c: [] for c in ("entropy", "grad_norm")}
    signal, weight, gi, ai, pos, zero = [], [], [], [], [], []
    for g_idx, g in enumerate(groups):
        advantages = g.advantages or [0.0] * g.size
        zero_group = all(abs(a) <= ZERO_SIGNAL for a in advantages)
        for a_idx, ids in enumerate(g.token_ids or []):
            per = {c: v[a_idx] for c, v in g.token_columns.items()}
            for c in cols:
                cols[c] += [float(v) for v in per[c]]
            omega = per.get("omega") or [None] * len(ids)
            signal += [abs(o) if o is not None else abs(advantages[a_idx]) for o in omega]
            weight += [
                float(w) if w is not None else 1.0 for w in per.get("weight", [1.0] * len(ids))
            ]
            gi += [g_idx] * len(ids)
            ai += [a_idx] * len(ids)
            pos += list(range(len(ids)))
            zero += [zero_group] * len(ids)
    f64, i64 = torch.float64, torch.int64
    x = DifferenceInputs(
        entropy=torch.tensor(cols["entropy"], dtype=f64),
        grad_norm=torch.tensor(cols["grad_norm"], dtype=f64),
        signal=torch.tensor(signal, dtype=f64),
        weight=torch.tensor(weight, dtype=f64),
        group_index=torch.tensor(gi, dtype=i64),
        answer_index=torch.tensor(ai, dtype=i64),
        position=torch.tensor(pos, dtype=i64),
        zero_signal_group=torch.tensor(zero, dtype=torch.bool),
    )
    masks = {
        m: torch.tensor(
            [bool(v) for g in groups for ans in g.token_columns[col] for v in ans], dtype=torch.bool
        )
        for m, col in LOGGED_METHODS.items()
    }
    names = list(masks)
    return [
        explain(x, a, masks[a], b, masks[b]) for i, a in enumerate(names) for b in names[i + 1 :]
    ]


@dataclass
class StepOverview:
    """What a step's file says without a model: sizes, rewards, zero-signal groups."""

    step: int
    num_groups: int
    num_answers: int
    reward_mean: float | None
    reward_std: float | None
    zero_signal_share: float | None  # None where the file has no rewards (nor advantages)
    mean_answer_chars: float

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


def step_overview(step: RunStep) -> StepOverview:
    """The model-free summary of one step (rewards as the file has them; NaN skipped)."""
    rewards = [r for g in step.groups for r in (g.rewards or []) if not math.isnan(r)]
    zero: list[bool] = []
    for g in step.groups:
        values = g.rewards if g.rewards is not None else g.advantages
        if values is not None:
            finite = [v for v in values if not math.isnan(v)]
            zero.append(len(set(finite)) <= 1 if g.rewards is not None else not any(finite))
    lengths = [len(a) for g in step.groups for a in g.answers]
    return StepOverview(
        step=step.step,
        num_groups=len(step.groups),
        num_answers=len(lengths),
        reward_mean=_mean(rewards),
        reward_std=_std(rewards),
        zero_signal_share=sum(zero) / len(zero) if zero else None,
        mean_answer_chars=sum(lengths) / max(len(lengths), 1),
    )
