"""Typed results of an analysis: per token, per answer, per group, and the whole batch.

Plain dataclasses with raw floats (NaN stays NaN); how a server or a file shows them is the
caller's business.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gmts_core.decoding import token_text
from gmts_core.rewards import RewardVerdict

if TYPE_CHECKING:
    from gmts_core.config import AnalysisConfig
    from gmts_core.forward import AnswerStats
    from gmts_core.selection import Selection, SelectionInputs


@dataclass
class TokenRecord:
    position: int
    id: int
    text: str
    logprob: float
    prob: float
    entropy: float
    grad_norm: float
    grad_proxy: float
    scores: dict[str, float]
    ranks: dict[str, int]
    selected: dict[str, bool]
    alternatives: list[dict[str, Any]]
    grad_head: float | None = None


@dataclass
class AnswerRecord:
    index: int
    text: str  # decoded without special tokens (what the reward saw)
    decoded: str  # decoded with special tokens: exactly the join of the token texts
    reward: float
    reward_detail: RewardVerdict
    advantage: float
    weight: float
    finished: bool
    tokens: list[TokenRecord]

    @property
    def length(self) -> int:
        return len(self.tokens)

    def selected_count(self) -> dict[str, int]:
        methods = self.tokens[0].selected if self.tokens else {}
        return {m: sum(t.selected[m] for t in self.tokens) for m in methods}


@dataclass
class GroupRecord:
    index: int
    prompt: str
    answers: list[AnswerRecord]
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnalysisResult:
    model: str
    groups: list[GroupRecord]
    summary: dict[str, Any]
    config: AnalysisConfig

    def iter_answers(self) -> list[tuple[GroupRecord, AnswerRecord]]:
        return [(g, a) for g in self.groups for a in g.answers]


def build_tokens(
    tokenizer: Any,
    ids: list[int],
    texts: list[str],
    answer_stats: AnswerStats,
    x: SelectionInputs,
    sl: slice,
    selections: dict[str, Selection],
    include_grad_head: bool,
) -> list[TokenRecord]:
    """Token records of one answer; ``sl`` is the answer's slice of the flat batch tensors."""
    s = answer_stats.stats
    lp, ent, gn = s.logprob.tolist(), s.entropy.tolist(), s.grad_norm.tolist()
    proxy = x.grad_proxy[sl].tolist()
    hidden = answer_stats.hidden_norm.tolist()
    per_method = {
        m: (sel.scores[sl].tolist(), sel.ranks[sl].tolist(), sel.selected[sl].tolist())
        for m, sel in selections.items()
    }
    top_ids, top_lp = s.top_ids.tolist(), s.top_logprobs.tolist()
    tokens = []
    for t, tok_id in enumerate(ids):
        alts = [
            {"id": i, "text": token_text(tokenizer, i), "prob": math.exp(v)}
            for i, v in zip(top_ids[t], top_lp[t], strict=True)
        ]
        tokens.append(
            TokenRecord(
                position=t,
                id=tok_id,
                text=texts[t],
                logprob=lp[t],
                prob=math.exp(lp[t]),
                entropy=ent[t],
                grad_norm=gn[t],
                grad_proxy=proxy[t],
                scores={m: v[0][t] for m, v in per_method.items()},
                ranks={m: int(v[1][t]) for m, v in per_method.items()},
                selected={m: bool(v[2][t]) for m, v in per_method.items()},
                alternatives=alts,
                grad_head=proxy[t] * hidden[t] if include_grad_head else None,
            )
        )
    return tokens
