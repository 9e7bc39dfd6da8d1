"""Typed results of an analysis and their JSON form (the body of ``POST /v1/analyze``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gmts_core.decoding import token_text
from gmts_core.rewards import RewardVerdict

if TYPE_CHECKING:
    from gmts_core.analysis import AnalysisConfig
    from gmts_core.forward import AnswerStats
    from gmts_core.selection import Selection, SelectionInputs


def _num(x: float) -> float | None:
    """A JSON-safe float (None for NaN/Inf, which JSON cannot carry)."""
    return float(x) if math.isfinite(x) else None


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
    ratio: float = 1.0  # pi_theta / pi_old (1: the analysed policy sampled or scores the answer)
    clipped: bool = False  # the clipped objective is flat here (zero policy-gradient)
    coef: float = 0.0  # omega_t: d loss / d log pi = -w_i omega_t (gmts_core.coefficient)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "position": self.position,
            "id": self.id,
            "text": self.text,
            "logprob": _num(self.logprob),
            "prob": _num(self.prob),
            "entropy": _num(self.entropy),
            "grad_norm": _num(self.grad_norm),
            "grad_proxy": _num(self.grad_proxy),
            "ratio": _num(self.ratio),
            "clipped": self.clipped,
            "coef": _num(self.coef),
            "scores": {m: _num(v) for m, v in self.scores.items()},
            "ranks": self.ranks,
            "selected": self.selected,
            "alternatives": self.alternatives,
        }
        if self.grad_head is not None:
            d["grad_head"] = _num(self.grad_head)
        return d


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
    # sampled | ids (given token ids) | text (given text tokenized alone, no special tokens,
    # appended to the prompt's ids): see gmts_core.analysis
    tokenization: str = "sampled"

    @property
    def length(self) -> int:
        return len(self.tokens)

    def selected_count(self) -> dict[str, int]:
        methods = self.tokens[0].selected if self.tokens else {}
        return {m: sum(t.selected[m] for t in self.tokens) for m in methods}

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "text": self.text,
            "reward": self.reward,
            "reward_detail": self.reward_detail.to_dict(),
            "advantage": self.advantage,
            "weight": self.weight,
            "length": self.length,
            "finished": self.finished,
            "tokenization": self.tokenization,
            "selected_count": self.selected_count(),
            "tokens": [t.to_dict() for t in self.tokens],
        }


@dataclass
class GroupRecord:
    index: int
    prompt: str
    answers: list[AnswerRecord]
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "prompt": self.prompt,
            "answers": [a.to_dict() for a in self.answers],
            "summary": self.summary,
        }


@dataclass
class AnalysisResult:
    model: str
    groups: list[GroupRecord]
    summary: dict[str, Any]
    config: AnalysisConfig

    def to_dict(self) -> dict[str, Any]:
        """Single-group form: the group's prompt and answers at top level; batch form: groups."""
        base = {"model": self.model, "summary": self.summary, "settings": _settings(self.config)}
        if len(self.groups) == 1:
            g = self.groups[0]
            return {**base, "prompt": g.prompt, "answers": [a.to_dict() for a in g.answers]}
        return {**base, "groups": [g.to_dict() for g in self.groups]}

    def iter_answers(self) -> list[tuple[GroupRecord, AnswerRecord]]:
        return [(g, a) for g in self.groups for a in g.answers]


def _settings(config: AnalysisConfig) -> dict[str, Any]:
    return {
        "temperature": config.temperature,
        "advantage": config.advantage,
        "loss_aggregation": config.loss_aggregation,
        "ratio": config.ratio,
        "scope": config.scope,
        "methods": list(config.methods),
    }


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
    n = len(proxy)
    ratio = x.ratio[sl].tolist() if x.ratio is not None else [1.0] * n
    clipped = x.clipped[sl].tolist() if x.clipped is not None else [False] * n
    coef = x.coef[sl].tolist() if x.coef is not None else [math.nan] * n
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
                ratio=ratio[t],
                clipped=bool(clipped[t]),
                coef=coef[t],
            )
        )
    return tokens
