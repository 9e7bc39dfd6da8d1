"""A run step's per-token numbers as its trainer's dump logged them: the step shown from them
alone (dump mode, no forward pass: ``numbers=logged``), and, in an analysis with the model,
each token's logged numbers beside the recomputed ones (``TokenOut.logged``)."""

from __future__ import annotations

import math
from typing import Any

from app.schemas.analyze_response import AnalyzeResponse
from app.schemas.runs import LoggedAnswer, LoggedGroup, LoggedToken
from gmts_core.config import AnalysisConfig
from gmts_core.errors import InvalidInputError
from gmts_core.runs.base import RunFormatError, RunStep
from gmts_core.runs.logged_tokens import (
    LoggedTokens,
    logged_tokens,
    model_free_selections,
    token_numbers,
)
from gmts_core.stats.decoding import token_texts


def check_token_ids(ids: list[int], vocabulary: int, source: Any, answer: int) -> None:
    """Refuse an answer whose token ids fall outside the model's tokenizer: a dump or log
    of another model, read with the wrong one."""
    outside = next((t for t in ids if not 0 <= t < vocabulary), None)
    if outside is not None:
        raise RunFormatError(
            source,
            None,
            f"answer {answer}: token id {outside} is not in the vocabulary of the model's "
            f"tokenizer ({vocabulary} tokens): a dump or log of another model?",
        )


def step_tokens(step: RunStep) -> LoggedTokens:
    """The step's logged per-token numbers, or a clear refusal naming what is missing."""
    tokens = logged_tokens(step)
    if tokens is None:
        raise InvalidInputError(
            f"step {step.step}: the dump logs no per-token numbers, so it cannot be shown "
            "without the model (numbers=recomputed)"
        )
    return tokens


def dump_groups(
    step: RunStep, tokens: LoggedTokens, config: AnalysisConfig, tokenizer: Any
) -> list[LoggedGroup]:
    """The step's groups from the dump's numbers: each token's text (``tokenizer`` decodes the
    ids; nothing is run through the model), its loss mask, its logged numbers and the
    model-free selections (``entropy``, ``gmts_entropy``) over the trained tokens."""
    selections = {m: s.selected.tolist() for m, s in model_free_selections(tokens, config).items()}
    numbers = token_numbers(tokens)
    trained = tokens.trained.tolist()
    flat = 0
    groups = []
    vocabulary = len(tokenizer)
    for gi, g in enumerate(step.groups):
        answers = []
        for ai, ids in enumerate(g.token_ids or []):
            check_token_ids(ids, vocabulary, g.source, ai)
            texts = token_texts(tokenizer, ids)
            toks = []
            for t, tid in enumerate(ids):
                row = numbers[flat]
                toks.append(
                    LoggedToken(
                        position=t,
                        id=tid,
                        text=texts[t],
                        entropy=row.get("entropy"),
                        logprob=row.get("trainer_logprob"),
                        grad_norm=None,  # needs the model
                        grad_proxy=None,
                        selected={m: bool(s[flat]) for m, s in selections.items()},
                        trained=trained[flat],
                        logged=row,
                    )
                )
                flat += 1
            adv = g.advantages[ai] if g.advantages is not None else math.nan
            answers.append(
                LoggedAnswer(
                    index=ai,
                    text=g.answers[ai] or "".join(texts),
                    advantage=None if math.isnan(adv) else adv,
                    length=len(ids),
                    selected_count={m: sum(t.selected[m] for t in toks) for m in selections},
                    tokens=toks,
                )
            )
        prompt = g.prompt or str(
            tokenizer.decode(g.prompt_token_ids or [], skip_special_tokens=False)
        )
        groups.append(LoggedGroup(index=gi, prompt=prompt, answers=answers))
    return groups


def attach_logged(body: AnalyzeResponse, step: RunStep, result: Any) -> None:
    """Each token of the analysis ``body`` gets the numbers the dump logged for it
    (``TokenOut.logged``), the mismatch's trainer side recomputed by the model where the dump
    has none; nothing where the dump logs no per-token numbers or the token counts differ."""
    tokens = logged_tokens(step)
    inputs = getattr(result, "inputs", None)
    if tokens is None or inputs is None:
        return
    answers = [a for g in body.groups or [] for a in g.answers] if body.groups else body.answers
    flat = [t for a in answers or [] for t in a.tokens]
    if len(flat) != tokens.trained.numel():
        return
    for tok, row in zip(flat, token_numbers(tokens, inputs.logprob), strict=True):
        tok.logged = {name: value for name, value in row.items()}  # noqa: C416
