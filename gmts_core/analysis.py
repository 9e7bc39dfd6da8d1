"""The one entry point: analyze groups of answers token by token.

For each group (a prompt with G answers, given or sampled) it computes rewards, group
advantages, loss weights, per-token statistics (of sampled answers from the logits they were
sampled from, collected during ``generate``; of given answers from one forward pass), every
selection method's scores, ranks and flags, and the summaries of DESIGN §2.4. The result
serializes (``to_dict``) to exactly the JSON body of ``POST /v1/analyze``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gmts_core.advantages import compute_advantages
from gmts_core.aggregation import loss_weights
from gmts_core.decoding import batch_token_texts
from gmts_core.errors import InvalidInputError
from gmts_core.forward import AnswerStats, answer_token_stats
from gmts_core.metrics import grad_proxy
from gmts_core.modeling import LoadedModel
from gmts_core.records import AnalysisResult, AnswerRecord, GroupRecord, build_tokens
from gmts_core.rewards import RewardVerdict, compute_reward, explicit_reward
from gmts_core.sampling import SamplingConfig, StatsSpec, sample_groups
from gmts_core.selection import (
    SCOPES,
    Selection,
    SelectionInputs,
    list_methods,
    select,
    selection_budget,
)
from gmts_core.summaries import (
    budget_share,
    gradient_coverage,
    pairwise_overlap,
    spearman_by_answer,
    wasted_share,
)

logger = logging.getLogger(__name__)

DEFAULT_METHODS = ("entropy", "gmts", "gmts_entropy", "surprisal", "random", "all")


@dataclass(frozen=True)
class RewardSpec:
    """A verifiable reward rule and its reference (e.g. numeric, "85")."""

    kind: str
    reference: Any


@dataclass
class GroupInput:
    """One prompt with its answers (given, or sampled with ``sampling``) and how to reward them."""

    prompt: str
    answers: list[str] | None = None
    sampling: SamplingConfig | None = None
    reward: RewardSpec | None = None
    rewards: list[float] | None = None


@dataclass(frozen=True)
class AnalysisConfig:
    """Algorithm knobs of an analysis (documented in DESIGN §2)."""

    temperature: float = 1.0  # tau of pi = softmax(z / tau); also the sampling temperature
    advantage: str = "grpo"
    loss_aggregation: str = "token_mean"
    ratio: float = 0.2
    scope: str = "batch"
    methods: tuple[str, ...] = DEFAULT_METHODS
    top_alternatives: int = 5
    seed: int = 0  # for the `random` method
    chat_template: bool = False
    include_grad_head: bool = False
    chunk_size: int = 128

    def validate(self) -> None:
        if self.temperature <= 0:
            raise InvalidInputError("temperature must be > 0 for token statistics")
        if not 0 < self.ratio <= 1:
            raise InvalidInputError(f"ratio must be in (0, 1], got {self.ratio}")
        if self.scope not in SCOPES:
            raise InvalidInputError(f"unknown scope {self.scope!r}; valid: {', '.join(SCOPES)}")
        valid = list_methods()
        for m in self.methods:
            if m not in valid:
                raise InvalidInputError(
                    f"unknown selection method {m!r}; valid: {', '.join(valid)}"
                )
        if not self.methods:
            raise InvalidInputError("at least one selection method is needed")


@dataclass
class _Group:
    """Working state of one group while it is analyzed."""

    prompt: str
    prompt_ids: list[int]
    answer_ids: list[list[int]]
    finished: list[bool]
    texts: list[str] = field(default_factory=list)
    verdicts: list[RewardVerdict] = field(default_factory=list)
    advantages: torch.Tensor | None = None  # (G,) float64
    stats: list[AnswerStats] | None = None  # collected while sampling, if asked


def encode_prompt(tokenizer: Any, prompt: str, chat_template: bool) -> list[int]:
    """Prompt token ids, through the tokenizer's chat template if asked."""
    if chat_template:
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidInputError("this tokenizer has no chat template")
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return list(ids)
    ids = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if not ids and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id]
    if not ids:
        raise InvalidInputError("prompt is empty after tokenization")
    return ids


def _given_answer_ids(tok: Any, answers: list[str]) -> list[list[int]]:
    ids = [list(tok(a, add_special_tokens=False)["input_ids"]) for a in answers]
    if any(not a for a in ids):
        raise InvalidInputError("every answer needs at least one token")
    return ids


def _prepare_groups(
    lm: LoadedModel, groups: Sequence[GroupInput], config: AnalysisConfig, collect_stats: bool
) -> list[_Group]:
    """Tokenize every group (given answers first: bad input fails before any sampling), then
    sample the groups without answers, compatible groups in one generate call (with
    ``collect_stats``, collecting their tokens' statistics on the way)."""
    tok = lm.tokenizer
    prompts = [encode_prompt(tok, g.prompt, config.chat_template) for g in groups]
    work = {
        i: _Group(g.prompt, prompts[i], _given_answer_ids(tok, g.answers), [True] * len(g.answers))
        for i, g in enumerate(groups)
        if g.answers is not None
    }
    to_sample = [i for i, g in enumerate(groups) if g.answers is None]
    default = SamplingConfig(temperature=config.temperature)
    configs = [groups[i].sampling or default for i in to_sample]
    spec = StatsSpec(config.temperature, config.top_alternatives, config.chunk_size)
    sampled = sample_groups(
        lm.model, tok, [prompts[i] for i in to_sample], configs, spec if collect_stats else None
    )
    for i, answers in zip(to_sample, sampled, strict=True):
        ids, finished = [a.token_ids for a in answers], [a.finished for a in answers]
        work[i] = _Group(groups[i].prompt, prompts[i], ids, finished)
        if collect_stats:
            work[i].stats = [a.stats for a in answers if a.stats is not None]
    return [work[i] for i in range(len(groups))]


def _reward_group(lm: LoadedModel, group: _Group, spec: GroupInput, advantage: str) -> None:
    tok = lm.tokenizer
    group.texts = [tok.decode(a, skip_special_tokens=True) for a in group.answer_ids]
    if spec.rewards is not None:
        if len(spec.rewards) != len(group.answer_ids):
            raise InvalidInputError(
                f"got {len(spec.rewards)} rewards for {len(group.answer_ids)} answers"
            )
        group.verdicts = [explicit_reward(r) for r in spec.rewards]
    elif spec.reward is not None:
        group.verdicts = [
            compute_reward(spec.reward.kind, t, spec.reward.reference) for t in group.texts
        ]
    else:
        raise InvalidInputError("give either a reward rule (reward) or explicit rewards")
    rewards = torch.tensor([v.reward for v in group.verdicts], dtype=torch.float64)
    group.advantages = compute_advantages(rewards, advantage)


def _selection_inputs(
    groups: list[_Group], stats: list[AnswerStats], weights: torch.Tensor, seed: int
) -> SelectionInputs:
    """Flatten per-answer stats into per-token tensors ordered by (group, answer, position)."""
    scale, answer_idx, group_idx = [], [], []
    a = 0
    for gi, g in enumerate(groups):
        assert g.advantages is not None
        for ai in range(len(g.answer_ids)):
            n = len(g.answer_ids[ai])
            scale.append(torch.full((n,), float(g.advantages[ai].abs() * weights[a])))
            answer_idx.append(torch.full((n,), a, dtype=torch.long))
            group_idx.append(torch.full((n,), gi, dtype=torch.long))
            a += 1
    cat = lambda f: torch.cat([f(s).double().cpu() for s in stats])  # noqa: E731
    signal_scale = torch.cat(scale).double()
    grad_norm = cat(lambda s: s.stats.grad_norm)
    return SelectionInputs(
        entropy=cat(lambda s: s.stats.entropy),
        logprob=cat(lambda s: s.stats.logprob),
        grad_norm=grad_norm,
        grad_proxy=grad_proxy(signal_scale, torch.ones_like(signal_scale), grad_norm),
        signal_scale=signal_scale,
        answer_index=torch.cat(answer_idx),
        group_index=torch.cat(group_idx),
        seed=seed,
    )


@dataclass
class PreparedGroups:
    """Groups tokenized (or sampled) and rewarded: everything an analysis needs but the
    statistics. ``sequences`` lists (prompt_ids, answer_ids) per answer in (group, answer)
    order, the order statistics must come in."""

    groups: list[_Group]
    sequences: list[tuple[list[int], list[int]]]

    def collected_stats(self) -> list[AnswerStats | None]:
        """Per answer, the statistics collected while sampling it (None: not collected)."""
        out: list[AnswerStats | None] = []
        for g in self.groups:
            stats = g.stats if g.stats and len(g.stats) == len(g.answer_ids) else None
            out += stats if stats is not None else [None] * len(g.answer_ids)
        return out


def prepare_groups(
    lm: LoadedModel,
    groups: Sequence[GroupInput],
    config: AnalysisConfig,
    progress: Callable[[str], None] | None = None,
    collect_stats: bool = False,
) -> PreparedGroups:
    """Validate, tokenize or sample every group, and reward its answers (the first stage of
    :func:`analyze`). With ``collect_stats`` sampled answers carry their statistics from the
    sampling itself (:meth:`PreparedGroups.collected_stats`); the RL step leaves it off, as it
    computes the statistics in its training forward."""
    config.validate()
    if not groups:
        raise InvalidInputError("at least one group is needed")
    note = progress or (lambda _msg: None)
    note("sampling" if any(g.answers is None for g in groups) else "tokenizing")
    work = _prepare_groups(lm, groups, config, collect_stats)
    for w, g in zip(work, groups, strict=True):
        _reward_group(lm, w, g, config.advantage)
    return PreparedGroups(work, [(w.prompt_ids, a) for w in work for a in w.answer_ids])


def finish_analysis(
    lm: LoadedModel,
    prepared: PreparedGroups,
    stats: list[AnswerStats],
    config: AnalysisConfig,
    progress: Callable[[str], None] | None = None,
) -> AnalysisResult:
    """Weights, selections, records and summaries from the answers' statistics (one
    :class:`AnswerStats` per entry of ``prepared.sequences``): the last stage of :func:`analyze`."""
    if len(stats) != len(prepared.sequences):
        raise ValueError(f"{len(stats)} statistics for {len(prepared.sequences)} answers")
    lengths = torch.tensor([len(a) for _, a in prepared.sequences])
    weights = loss_weights(lengths, config.loss_aggregation)  # over the whole batch, as trainers do
    x = _selection_inputs(prepared.groups, stats, weights, config.seed)
    (progress or (lambda _msg: None))("selection")
    selections = {m: select(x, m, config.ratio, config.scope) for m in config.methods}
    return _assemble(lm, prepared.groups, stats, weights, x, selections, config)


def analyze(
    lm: LoadedModel,
    groups: Sequence[GroupInput],
    config: AnalysisConfig = AnalysisConfig(),
    progress: Callable[[str], None] | None = None,
) -> AnalysisResult:
    """Analyze one or more groups; with scope ``batch`` selection ranks all their tokens."""
    # grad_head needs final hidden states, which sampling records too (their norms)
    prepared = prepare_groups(lm, groups, config, progress, collect_stats=True)
    stats = prepared.collected_stats()
    missing = [i for i, s in enumerate(stats) if s is None]  # given answers
    if missing:
        if progress is not None:
            progress("forward pass")
        computed = answer_token_stats(
            lm.model,
            [prepared.sequences[i] for i in missing],
            lm.tokenizer.pad_token_id,
            config.temperature,
            config.top_alternatives,
            config.chunk_size,
        )
        for i, s in zip(missing, computed, strict=True):
            stats[i] = s
    return finish_analysis(lm, prepared, [s for s in stats if s is not None], config, progress)


def _assemble(
    lm: LoadedModel,
    work: list[_Group],
    stats: list[AnswerStats],
    weights: torch.Tensor,
    x: SelectionInputs,
    selections: dict[str, Selection],
    config: AnalysisConfig,
) -> AnalysisResult:
    group_records: list[GroupRecord] = []
    decoded, texts = batch_token_texts(lm.tokenizer, [ids for g in work for ids in g.answer_ids])
    a, offset = 0, 0
    for gi, g in enumerate(work):
        answers: list[AnswerRecord] = []
        assert g.advantages is not None
        for ai, ids in enumerate(g.answer_ids):
            sl = slice(offset, offset + len(ids))
            tokens = build_tokens(
                lm.tokenizer,
                ids,
                texts[a],
                stats[a],
                x,
                sl,
                selections,
                config.include_grad_head,
            )
            answers.append(
                AnswerRecord(
                    index=ai,
                    text=g.texts[ai],
                    decoded=decoded[a],
                    reward=g.verdicts[ai].reward,
                    reward_detail=g.verdicts[ai],
                    advantage=float(g.advantages[ai]),
                    weight=float(weights[a]),
                    finished=g.finished[ai],
                    tokens=tokens,
                )
            )
            a, offset = a + 1, offset + len(ids)
        group_records.append(GroupRecord(index=gi, prompt=g.prompt, answers=answers))
    summary = summarize(x, selections, len(work), config)
    for gi, rec in enumerate(group_records):
        in_group = x.group_index == gi
        rec.summary = _group_summary(x, selections, in_group, rec)
    return AnalysisResult(model=lm.name, groups=group_records, summary=summary, config=config)


def _group_summary(
    x: SelectionInputs, selections: dict[str, Selection], mask: torch.Tensor, rec: GroupRecord
) -> dict[str, Any]:
    sub_proxy = x.grad_proxy[mask]
    return {
        "num_tokens": int(mask.sum()),
        "zero_signal": all(ans.advantage == 0 for ans in rec.answers),
        "reward_mean": sum(ans.reward for ans in rec.answers) / max(len(rec.answers), 1),
        "selected_count": {m: int(s.selected[mask].sum()) for m, s in selections.items()},
        "gradient_coverage": {
            m: gradient_coverage(sub_proxy, s.selected[mask]) for m, s in selections.items()
        },
        "spearman_entropy_grad": spearman_by_answer(
            x.entropy[mask], x.grad_proxy[mask], x.answer_index[mask]
        ),
    }


def summarize(
    x: SelectionInputs, selections: dict[str, Selection], num_groups: int, config: AnalysisConfig
) -> dict[str, Any]:
    """The batch summary of DESIGN §2.4 (and §5's keys)."""
    k = selection_budget(x, config.ratio, config.scope)
    group_zero = [
        bool((x.signal_scale[x.group_index == gi] == 0).all()) for gi in range(num_groups)
    ]
    return {
        "num_tokens": x.num_tokens,
        "num_answers": int(x.answer_index.max()) + 1 if x.num_tokens else 0,
        "num_groups": num_groups,
        "ratio": config.ratio,
        "scope": config.scope,
        "k": k,
        "zero_signal": all(group_zero),
        "num_zero_signal_groups": sum(group_zero),
        "selected_count": {m: int(s.selected.sum()) for m, s in selections.items()},
        "gradient_coverage": {
            m: gradient_coverage(x.grad_proxy, s.selected) for m, s in selections.items()
        },
        "wasted_share": {m: wasted_share(x.grad_proxy, s.selected) for m, s in selections.items()},
        "budget_share": {
            m: budget_share(s.selected, x.group_index, num_groups) for m, s in selections.items()
        },
        "overlap": pairwise_overlap(selections),
        "spearman_entropy_grad": spearman_by_answer(x.entropy, x.grad_proxy, x.answer_index),
    }
