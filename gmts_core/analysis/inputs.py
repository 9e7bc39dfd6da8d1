"""The inputs of an analysis and their preparation: groups of given or to-be-sampled answers,
reward rules, the request's token limit, and turning them into token ids (given answers
checked and tokenized first, so bad input fails before any sampling; then the groups without
answers sampled together)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gmts_core.config import AnalysisConfig
from gmts_core.errors import InvalidInputError, LimitExceededError
from gmts_core.methods.rewards import RewardVerdict
from gmts_core.model.loading import LoadedModel
from gmts_core.sampling.answers import SamplingConfig, StatsSpec, sample_groups
from gmts_core.stats.forward import AnswerStats
from gmts_core.stats.tokenization import encode_answer, encode_prompt

# How an answer's tokens were obtained (AnswerRecord.tokenization)
TOKENIZED_SAMPLED = "sampled"  # the ids the model generated
TOKENIZED_IDS = "ids"  # given token ids (e.g. a trainer's completion_ids): the trained tokens
# given text, tokenized on its own (no special tokens added) and appended to the prompt's ids,
# as trainers (TRL, verl) append generated ids; a text that re-tokenizes differently from the
# ids a model generated is analysed as these tokens, not those
TOKENIZED_TEXT = "text"


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
    # the answers' token ids (e.g. a trainer's completion_ids): analysed as given, so the
    # tokens are exactly the trained ones; without them given text answers are tokenized
    answer_ids: list[list[int]] | None = None
    # the advantages the trainer trained with (a run's logged ones): used as given, not
    # recomputed from the rewards; rewards may then be None (the file cannot tell them)
    advantages: list[float] | None = None
    # per answer, per token: did the trainer's loss count this token (loss_mask 1)? None: all
    # did. A token it did not count is never selected nor counted in a budget or summary
    trained: list[list[bool]] | None = None

    @property
    def given(self) -> bool:
        return self.answers is not None or self.answer_ids is not None


@dataclass
class GroupWork:
    """Working state of one group while it is analyzed."""

    prompt: str
    prompt_ids: list[int]
    answer_ids: list[list[int]]
    finished: list[bool]
    tokenization: str = TOKENIZED_SAMPLED
    texts: list[str] = field(default_factory=list)
    verdicts: list[RewardVerdict] = field(default_factory=list)
    advantages: torch.Tensor | None = None  # (G,) float64
    stats: list[AnswerStats] | None = None  # collected while sampling, if asked
    trained: list[list[bool]] | None = None  # GroupInput.trained, checked against the ids


def check_trained(g: GroupInput, work: GroupWork) -> list[list[bool]] | None:
    """``g.trained`` checked against the answers' token ids (one flag per token); a mask
    needs the ids it was written for (``answer_ids``): text re-tokenized could differ."""
    if g.trained is None:
        return None
    if g.answer_ids is None:
        raise InvalidInputError("a loss mask (trained) needs the answers' token ids (answer_ids)")
    if len(g.trained) != len(work.answer_ids) or any(
        len(m) != len(a) for m, a in zip(g.trained, work.answer_ids, strict=True)
    ):
        raise InvalidInputError("the loss mask (trained) must hold one flag per answer token")
    return [[bool(t) for t in m] for m in g.trained]


def _checked_ids(ids: list[list[int]], vocab_size: int) -> list[list[int]]:
    for a in ids:
        if not a:
            raise InvalidInputError("every answer needs at least one token")
        bad = [t for t in a if not 0 <= t < vocab_size]
        if bad:
            raise InvalidInputError(
                f"answer token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})"
            )
    return [list(map(int, a)) for a in ids]


def _given_group(
    lm: LoadedModel, g: GroupInput, prompt_ids: list[int], special_tokens: bool
) -> GroupWork:
    if g.answer_ids is not None:
        ids = _checked_ids(g.answer_ids, lm.vocab_size)
        return GroupWork(g.prompt, prompt_ids, ids, [True] * len(ids), TOKENIZED_IDS)
    assert g.answers is not None
    ids = _given_answer_ids(lm.tokenizer, g.answers, special_tokens)
    return GroupWork(g.prompt, prompt_ids, ids, [True] * len(ids), TOKENIZED_TEXT)


def _given_answer_ids(tok: Any, answers: list[str], special_tokens: bool) -> list[list[int]]:
    ids = [encode_answer(tok, a, special_tokens) for a in answers]
    if any(not a for a in ids):
        raise InvalidInputError("every answer needs at least one token")
    return ids


@dataclass(frozen=True)
class TokenLimit:
    """At most ``max_tokens`` tokens in all sequences of a request (prompt + answer; a sampled
    answer counts ``max_new_tokens``), checked on the tokens the analysis itself uses, before
    any sampling or forward pass. ``setting`` names the limit in the error message."""

    max_tokens: int
    setting: str = "max_tokens"

    def check(
        self,
        prompts: list[list[int]],
        given: dict[int, GroupWork],
        sampled: dict[int, SamplingConfig],
    ) -> None:
        total = sum(len(prompts[i]) + len(a) for i, g in given.items() for a in g.answer_ids)
        total += sum(
            c.num_samples * (len(prompts[i]) + c.max_new_tokens) for i, c in sampled.items()
        )
        if total > self.max_tokens:
            raise LimitExceededError(
                f"the number of tokens (prompts + answers) is {total}; the limit is "
                f"{self.max_tokens} ({self.setting})"
            )


def tokenize_and_sample(
    lm: LoadedModel,
    groups: Sequence[GroupInput],
    config: AnalysisConfig,
    collect_stats: bool,
    token_limit: TokenLimit | None = None,
) -> list[GroupWork]:
    """Tokenize every group (given answers first: bad input fails before any sampling), check
    ``token_limit`` on those tokens, then sample the groups without answers, compatible groups
    in one generate call (with ``collect_stats``, collecting their tokens' statistics)."""
    tok = lm.tokenizer
    prompts = [encode_prompt(tok, g.prompt, config.chat_template) for g in groups]
    work = {
        i: _given_group(lm, g, prompts[i], config.answer_special_tokens)
        for i, g in enumerate(groups)
        if g.given
    }
    to_sample = [i for i, g in enumerate(groups) if not g.given]
    default = SamplingConfig(temperature=config.temperature)
    configs = [groups[i].sampling or default for i in to_sample]
    if token_limit is not None:
        token_limit.check(prompts, work, dict(zip(to_sample, configs, strict=True)))
    spec = StatsSpec(config.temperature, config.top_alternatives, config.chunk_size)
    sampled = sample_groups(
        lm.model, tok, [prompts[i] for i in to_sample], configs, spec if collect_stats else None
    )
    for i, w in work.items():
        w.trained = check_trained(groups[i], w)
    for i, answers in zip(to_sample, sampled, strict=True):
        ids, finished = [a.token_ids for a in answers], [a.finished for a in answers]
        work[i] = GroupWork(groups[i].prompt, prompts[i], ids, finished)
        if collect_stats:
            work[i].stats = [a.stats for a in answers if a.stats is not None]
    return [work[i] for i in range(len(groups))]
