"""Typed results of an analysis: per token, per answer, per group, and the whole batch.

Plain dataclasses with raw floats (NaN stays NaN); how a server or a file shows them is the
caller's business. An answer's per-token records are built on first use
(:class:`LazyTokens`): the live RL step trains from the flat tensors and never needs them
unless a front end asks for the tokens.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from gmts_core.methods.rewards import RewardVerdict
from gmts_core.stats.decoding import token_text

if TYPE_CHECKING:
    from gmts_core.config import AnalysisConfig
    from gmts_core.methods.selection import Selection, SelectionInputs
    from gmts_core.stats.forward import AnswerStats


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
    # the top-k tokens: id, text, prob and logprob (from the log-softmax, not the log of the
    # rounded prob: a near-certain token's log p keeps its digits)
    alternatives: list[dict[str, Any]]
    grad_head: float | None = None
    ratio: float = 1.0  # pi_theta / pi_old (1: the analysed policy sampled or scores the answer)
    clipped: bool = False  # the clipped objective is flat here (zero policy-gradient)
    coef: float = 0.0  # omega_t: d loss / d log pi = -w_i omega_t (gmts_core.methods.coefficient)
    trained: bool = True  # the trainer's loss counted it (loss mask 1); else shown, never selected


class LazyTokens(Sequence[TokenRecord]):
    """An answer's token records, built by ``build`` on first access (then kept).

    The length is known up front, so ``len`` (and :attr:`AnswerRecord.length`) builds nothing.
    Compares equal to any sequence of the same records, a list included.
    """

    def __init__(self, length: int, build: Callable[[], list[TokenRecord]]) -> None:
        self._length = length
        self._build: Callable[[], list[TokenRecord]] | None = build
        self._items: list[TokenRecord] | None = None
        self._lock = threading.Lock()  # a session's result may be read by two requests at once

    @property
    def built(self) -> bool:
        """Whether the records exist yet."""
        return self._items is not None

    def _records(self) -> list[TokenRecord]:
        if self._items is None:
            with self._lock:
                if self._items is None:
                    assert self._build is not None
                    items = self._build()
                    if len(items) != self._length:
                        raise ValueError(f"built {len(items)} token records, not {self._length}")
                    self._items, self._build = items, None  # the builder's tensors are freed
        return self._items

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, i: int) -> TokenRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[TokenRecord]: ...
    def __getitem__(self, i: int | slice) -> TokenRecord | list[TokenRecord]:
        return self._records()[i]

    def __iter__(self) -> Iterator[TokenRecord]:
        return iter(self._records())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable-like, as a list

    def __repr__(self) -> str:
        return repr(self._records())

    def __getstate__(self) -> dict[str, Any]:  # copy/deepcopy: built records, no lock
        return {"_length": self._length, "_items": self._records()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._length, self._items, self._build = state["_length"], state["_items"], None
        self._lock = threading.Lock()


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
    tokens: Sequence[TokenRecord]  # a list, or LazyTokens (built on first access)
    # sampled | ids (given token ids) | text (given text tokenized alone, no special tokens,
    # appended to the prompt's ids): see gmts_core.analysis.analyze
    tokenization: str = "sampled"

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
    # every method's flat selection, (N,) tensors in (group, answer, position) order: what the
    # token records' scores, ranks and flags are read from (the RL step's mask comes from here)
    selections: dict[str, Selection] = field(default_factory=dict, repr=False, compare=False)
    # the flat per-token inputs of the selection (same order) and each answer's token ids and
    # texts: what a columnar writer (gmts_core.run_dataset) reads without building records
    inputs: SelectionInputs | None = field(default=None, repr=False, compare=False)
    token_ids: list[list[int]] = field(default_factory=list, repr=False, compare=False)
    token_texts: list[list[str]] = field(default_factory=list, repr=False, compare=False)

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
    n = len(proxy)
    ratio = x.ratio[sl].tolist() if x.ratio is not None else [1.0] * n
    clipped = x.clipped[sl].tolist() if x.clipped is not None else [False] * n
    coef = x.coef[sl].tolist() if x.coef is not None else [math.nan] * n
    trained = x.trained[sl].tolist() if x.trained is not None else [True] * n
    hidden = answer_stats.hidden_norm.tolist()
    per_method = {
        m: (sel.scores[sl].tolist(), sel.ranks[sl].tolist(), sel.selected[sl].tolist())
        for m, sel in selections.items()
    }
    top_ids, top_lp = s.top_ids.tolist(), s.top_logprobs.tolist()
    tokens = []
    for t, tok_id in enumerate(ids):
        alts = [
            {"id": i, "text": token_text(tokenizer, i), "prob": math.exp(v), "logprob": v}
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
                trained=bool(trained[t]),
            )
        )
    return tokens
