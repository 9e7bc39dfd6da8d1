"""The one entry point: analyze groups of answers token by token.

For each group (a prompt with G answers, given or sampled) it computes rewards, group
advantages, loss weights, per-token statistics (of sampled answers from the logits they were
sampled from, collected during ``generate``; of given answers from one forward pass), every
selection method's scores, ranks and flags, and the teaching summaries (gradient coverage,
overlaps, Spearman correlations, wasted share). Its knobs are
:class:`gmts_core.config.AnalysisConfig`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch

from gmts_core.analysis.inputs import (
    GroupInput,
    GroupWork,
    RewardSpec,
    TokenLimit,
    tokenize_and_sample,
)
from gmts_core.analysis.records import (
    AnalysisResult,
    AnswerRecord,
    GroupRecord,
    LazyTokens,
    build_tokens,
)
from gmts_core.analysis.summaries import group_summaries, summarize
from gmts_core.config import AnalysisConfig
from gmts_core.errors import InvalidInputError
from gmts_core.methods.advantages import compute_advantages
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.budget import flat_ids, special_ids, special_mask, with_budget
from gmts_core.methods.coefficient import ClipSettings, effective_coefficient, selection_inputs
from gmts_core.methods.rewards import RewardVerdict, compute_reward, explicit_reward
from gmts_core.methods.selection import Selection, SelectionInputs, select
from gmts_core.model.loading import LoadedModel
from gmts_core.model.rope_window import longrope_window
from gmts_core.progress import (
    GENERATING,
    REWARDS,
    SELECTION,
    STATISTICS,
    TOKENIZING,
    StageCallback,
    Stages,
)
from gmts_core.progress import stages as new_stages
from gmts_core.stats.contexts import share_identical_contexts
from gmts_core.stats.decoding import batch_token_texts
from gmts_core.stats.forward import AnswerStats, answer_token_stats

logger = logging.getLogger(__name__)

__all__ = [  # the entry points; the inputs (GroupInput, RewardSpec, TokenLimit) and the config
    # are defined in gmts_core.analysis.inputs and gmts_core.config, importable from here too
    "ANALYZE_STAGES",
    "AnalysisConfig",
    "GroupInput",
    "PreparedGroups",
    "RewardSpec",
    "TokenLimit",
    "analyze",
    "finish_analysis",
    "prepare_groups",
]

ANALYZE_STAGES = 4  # generating/tokenizing, rewards, token statistics, selection


# the reward of an answer whose run logged its advantage but no reward the file can tell
UNKNOWN_REWARD = RewardVerdict(math.nan, "unknown", None, None, "not in the file")


def _reward_group(
    lm: LoadedModel, group: GroupWork, spec: GroupInput, advantage: str, as_text: bool = True
) -> None:
    tok = lm.tokenizer
    if spec.answers is not None and spec.answer_ids is None and as_text:
        group.texts = list(spec.answers)  # given text is rewarded (and shown) as given
    else:
        group.texts = [tok.decode(a, skip_special_tokens=True) for a in group.answer_ids]
    n = len(group.answer_ids)
    if spec.rewards is not None:
        if len(spec.rewards) != n:
            raise InvalidInputError(f"got {len(spec.rewards)} rewards for {n} answers")
        group.verdicts = [explicit_reward(r) for r in spec.rewards]
    elif spec.reward is not None:
        group.verdicts = [
            compute_reward(spec.reward.kind, t, spec.reward.reference) for t in group.texts
        ]
    elif spec.advantages is not None:  # a run whose file has advantages but no readable rewards
        group.verdicts = [UNKNOWN_REWARD] * n
    else:
        raise InvalidInputError("give either a reward rule (reward) or explicit rewards")
    if spec.advantages is not None:  # the trainer's own: authoritative
        if len(spec.advantages) != n:
            raise InvalidInputError(f"got {len(spec.advantages)} advantages for {n} answers")
        group.advantages = torch.tensor([float(a) for a in spec.advantages], dtype=torch.float64)
        if not torch.isfinite(group.advantages).all():
            raise InvalidInputError("a given advantage is not a finite number")
        return
    rewards = torch.tensor([v.reward for v in group.verdicts], dtype=torch.float64)
    group.advantages = compute_advantages(rewards, advantage)


def _selection_inputs(
    groups: list[GroupWork],
    stats: list[AnswerStats],
    weights: torch.Tensor,
    config: AnalysisConfig,
    beta: float,
    ref_logp: torch.Tensor | None = None,
) -> SelectionInputs:
    """Flatten per-answer stats into per-token tensors ordered by (group, answer, position).

    The answers were sampled from (or are scored by) the analysed policy, so r = 1; with a
    reference (a session's start) and beta > 0 the coefficient has the KL term.
    """
    adv, rew, lengths, group_of = [], [], [], []
    for gi, g in enumerate(groups):
        assert g.advantages is not None
        for ai, ids in enumerate(g.answer_ids):
            adv.append(float(g.advantages[ai]))
            rew.append(float(g.verdicts[ai].reward))
            lengths.append(len(ids))
            group_of.append(gi)
    counts = torch.tensor(lengths, dtype=torch.long)
    per_token = partial(torch.repeat_interleave, repeats=counts)  # per answer -> per token
    adv_t = per_token(torch.tensor(adv, dtype=torch.float64))
    rew_t = per_token(torch.tensor(rew, dtype=torch.float64))
    weight = per_token(weights.detach().to(torch.float64).cpu())
    answer_index = per_token(torch.arange(len(lengths)))
    group_index = per_token(torch.tensor(group_of, dtype=torch.long))
    cat = lambda f: torch.cat([f(s).double().cpu() for s in stats])  # noqa: E731
    logprob = cat(lambda s: s.stats.logprob)
    coefficient = effective_coefficient(
        adv_t,
        weight,
        ClipSettings(beta=beta),
        logp=logprob,
        old_logp=None,
        ref_logp=ref_logp,
    )
    x = selection_inputs(
        entropy=cat(lambda s: s.stats.entropy),
        logprob=logprob,
        grad_norm=cat(lambda s: s.stats.grad_norm),
        weight=weight,
        answer_index=answer_index,
        group_index=group_index,
        coefficient=coefficient,
        seed=config.seed,
        advantage=adv_t,
        # unknown rewards (a run that logged only advantages): the paper's methods use A
        reward=rew_t if bool(torch.isfinite(rew_t).all()) else None,
    )
    if any(g.trained is not None for g in groups):
        x.trained = torch.tensor(
            [
                t
                for g in groups
                for ai, ids in enumerate(g.answer_ids)
                for t in (g.trained[ai] if g.trained is not None else [True] * len(ids))
            ],
            dtype=torch.bool,
        )
    return x


def _reference_logprobs(
    lm: LoadedModel, seqs: list[tuple[list[int], list[int]]], config: AnalysisConfig
) -> torch.Tensor | None:
    """log pi_ref of every answer token (N,) when the coefficient has a KL term, else None."""
    if config.beta_for(lm) == 0.0 or lm.reference is None:
        return None
    with lm.reference() as ref:
        stats = answer_token_stats(
            ref, seqs, lm.tokenizer.pad_token_id, config.temperature, 0, config.chunk_size
        )
    return torch.cat([s.stats.logprob.double().cpu() for s in stats])


@dataclass
class PreparedGroups:
    """Groups tokenized (or sampled) and rewarded: everything an analysis needs but the
    statistics. ``sequences`` lists (prompt_ids, answer_ids) per answer in (group, answer)
    order, the order statistics must come in."""

    groups: list[GroupWork]
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
    stages: Stages | None = None,
    collect_stats: bool = False,
    token_limit: TokenLimit | None = None,
) -> PreparedGroups:
    """Validate, tokenize or sample every group, and reward its answers (the first two stages
    of :func:`analyze`, announced through ``stages``). With ``collect_stats`` sampled answers
    carry their statistics from the sampling itself (:meth:`PreparedGroups.collected_stats`);
    the RL step leaves it off, as it computes the statistics in its training forward."""
    config.validate()
    if not groups:
        raise InvalidInputError("at least one group is needed")
    stages = stages or Stages()
    stages.begin(GENERATING if any(not g.given for g in groups) else TOKENIZING)
    work = tokenize_and_sample(lm, groups, config, collect_stats, token_limit)
    stages.begin(REWARDS)
    for w, g in zip(work, groups, strict=True):
        _reward_group(lm, w, g, config.advantage, not config.answer_special_tokens)
    return PreparedGroups(work, [(w.prompt_ids, a) for w in work for a in w.answer_ids])


def finish_analysis(
    lm: LoadedModel,
    prepared: PreparedGroups,
    stats: list[AnswerStats],
    config: AnalysisConfig,
    stages: Stages | None = None,
) -> AnalysisResult:
    """Weights, selections, records and summaries from the answers' statistics (one
    :class:`AnswerStats` per entry of ``prepared.sequences``, equal contexts already shared by
    :func:`gmts_core.stats.contexts.share_identical_contexts`): the last stage of :func:`analyze`.
    With a reference and beta > 0 the coefficient has the KL term."""
    if len(stats) != len(prepared.sequences):
        raise ValueError(f"{len(stats)} statistics for {len(prepared.sequences)} answers")
    lengths = torch.tensor([len(a) for _, a in prepared.sequences])
    weights = loss_weights(lengths, config.loss_aggregation)  # over the whole batch, as trainers do
    ref_logp = _reference_logprobs(lm, prepared.sequences, config)
    x = _selection_inputs(prepared.groups, stats, weights, config, config.beta_for(lm), ref_logp)
    special = None
    if config.budget_over == "content":  # the chat template's special tokens leave the budget
        ids = flat_ids([a for _, a in prepared.sequences])
        special = special_mask(ids, special_ids(lm.tokenizer))
    x = with_budget(x, config.budget_over, special)
    (stages or Stages()).begin(SELECTION)
    selections = {m: select(x, m, config.ratio, config.scope) for m in config.methods}
    return _assemble(lm, prepared.groups, stats, weights, x, selections, config)


def analyze(
    lm: LoadedModel,
    groups: Sequence[GroupInput],
    config: AnalysisConfig = AnalysisConfig(),
    on_stage: StageCallback | None = None,
    token_limit: TokenLimit | None = None,
) -> AnalysisResult:
    """Analyze one or more groups; with scope ``batch`` selection ranks all their tokens.

    ``on_stage(name, done, total)`` hears each stage as it begins (see
    :mod:`gmts_core.progress`): "generating answers" (or "tokenizing answers" when all are
    given), "scoring rewards", "token statistics", "selection". ``token_limit`` is checked on
    the analysis's own tokenization, before any sampling.
    """
    stages = new_stages(on_stage, ANALYZE_STAGES)
    # grad_head needs final hidden states, which sampling records too (their norms)
    prepared = prepare_groups(
        lm, groups, config, stages, collect_stats=True, token_limit=token_limit
    )
    stages.begin(STATISTICS)  # of sampled answers: collected while sampling
    stats = prepared.collected_stats()
    missing = [i for i, s in enumerate(stats) if s is None]  # given answers
    if missing:
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
    answers = [s for s in stats if s is not None]
    # equal contexts (a group's shared first tokens, shared prefixes) -> bit-equal statistics,
    # across sampled and given answers alike
    share_identical_contexts(prepared.sequences, answers, longrope_window(lm.model.config))
    return finish_analysis(lm, prepared, answers, config, stages)


def _assemble(
    lm: LoadedModel,
    work: list[GroupWork],
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
            # built when first read (a front end showing tokens), not by the RL step
            tokens = LazyTokens(
                len(ids),
                partial(
                    build_tokens,
                    lm.tokenizer,
                    ids,
                    texts[a],
                    stats[a],
                    x,
                    sl,
                    selections,
                    config.include_grad_head,
                ),
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
                    tokenization=g.tokenization,
                )
            )
            a, offset = a + 1, offset + len(ids)
        group_records.append(GroupRecord(index=gi, prompt=g.prompt, answers=answers))
    summary = summarize(x, selections, len(work), config)
    for rec, group_summary in zip(
        group_records, group_summaries(x, selections, group_records), strict=True
    ):
        rec.summary = group_summary
    return AnalysisResult(
        model=lm.name,
        groups=group_records,
        summary=summary,
        config=config,
        selections=selections,
        inputs=x,
        token_ids=[list(ids) for g in work for ids in g.answer_ids],
        token_texts=texts,
    )
