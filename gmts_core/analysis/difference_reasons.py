"""Why two selection methods differ: the tokens only one of them selects, grouped by the factor
that sets each one apart from the other method's cut.

A token's exact logit-gradient norm in the GRPO loss is  grad_proxy = w |omega_t| g_t
(``gmts_core.methods.coefficient``; on-policy without KL, |omega_t| = |A_i|): the answer's
aggregation weight, its advantage and the token's gradient norm g = ||e_y - p|| / tau. Entropy
H_t sees none of the first two and only part of the third.

The rule, for a token t that method X selects and method Y does not: t is compared with Y's
**cut token** r, the last token Y keeps where t competes -- of the tokens Y selects in t's scope
under Y (the batch, t's group or t's answer), the one Y ranks last (:class:`Cut`). Without Y's
ranks (a trainer's logged mask) r is the token of the smallest w |omega| g Y keeps in t's group
(else in the batch). Each factor's log-ratio d_f = log f_t - log f_r (f in |omega|, w, g) says
how that factor sets t apart from r:

* t's gradient is smaller than r's: the factor with the most negative d_f is the reason --
  ``zero_advantage`` (|omega_t| is 0, r's is not: a zero-signal group), ``smaller_advantage``,
  ``aggregation_weight`` or ``low_gradient`` (the sampled token holds more of the mass);
* t's gradient is larger: the factor with the largest positive d_f -- ``cut_zero_advantage``
  (r's |omega| is 0), ``larger_advantage``, ``aggregation_weight`` or ``high_gradient``;
* ``mixed`` when the runner-up factor moves t in the same direction by at least half as much;
* ``same_gradient`` when w |omega| g is equal: the gradient cannot tell t from r, the other
  method's own score (entropy, a random draw, a tie rule) decides;
* ``no_cut`` when Y keeps no token in t's scope (no reference token: -1).

A factor whose d_f is within ``EQUAL_LOG`` of 0 is never a reason, so a factor equal across the
batch (w under ``token_mean``, |A| when every answer's is the same) is never named. The rule
reads only the numbers, so it explains any two methods (entropy vs gmts, random vs gmts_paper,
a trainer's logged mask vs gmts, ...) in the same terms; every token carries its cut token
(:class:`TokenRef`), so a reader can check each stated reason against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from gmts_core.analysis.reason_texts import REASON_KEYS, REASONS
from gmts_core.analysis.records import AnalysisResult

# |omega| (|A| on-policy) at or below this counts as zero: advantages are in reward-std units
ZERO_SIGNAL = 1e-6
# factors whose log-ratio is within this of 0 are equal (float32 rounding of equal values)
EQUAL_LOG = 1e-5
# the runner-up factor makes a case ``mixed`` when it moves the token at least this share as far
MIXED_SHARE = 0.5


@dataclass
class DifferenceInputs:
    """Flat per-token numbers of a batch, all (N,), in (group, answer, position) order."""

    entropy: torch.Tensor  # H, nats
    grad_norm: torch.Tensor  # g = ||d log pi_y / d z||
    signal: torch.Tensor  # |omega| (|A| on-policy without KL)
    weight: torch.Tensor  # w of the token's answer
    group_index: torch.Tensor  # int64
    answer_index: torch.Tensor  # int64, index of the answer within its group
    position: torch.Tensor  # int64, position within the answer
    zero_signal_group: torch.Tensor  # bool: the token's group has equal rewards


@dataclass(frozen=True)
class TokenRef:
    """Where a token is (for click-through), which of the two methods selected it, and where
    its reference token is (the other method's cut token, the one it is compared with; -1 each
    where the other method keeps no token in its scope)."""

    group: int
    answer: int
    position: int
    selected_by: str
    reference_group: int
    reference_answer: int
    reference_position: int


@dataclass
class ReasonCount:
    """One reason's tokens: how many each method selects alone, and its share of that
    method's selection budget (its selected-token count)."""

    key: str
    label: str
    explanation: str
    count: int  # tokens selected by only one of the two methods for this reason
    count_a: int  # ... selected by method_a only
    count_b: int
    share_a: float  # count_a / method_a's selected tokens (0 when it selects none)
    share_b: float
    zero_signal_group: int  # of ``count``, tokens in zero-signal groups
    tokens: list[TokenRef] = field(default_factory=list)


@dataclass
class Differences:
    """The tokens only one of ``method_a`` and ``method_b`` selects, by reason."""

    method_a: str
    method_b: str
    selected_a: int
    selected_b: int
    both: int
    only_a: int
    only_b: int
    reasons: list[ReasonCount]


def _log(v: np.ndarray) -> np.ndarray:
    """log of non-negative factors, -inf at 0."""
    with np.errstate(divide="ignore"):
        return np.log(np.where(v > 0, v, 0.0))


def _factors(x: DifferenceInputs) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The factors |omega| (0 at or below ZERO_SIGNAL), w and g as float64 arrays, and their
    product w |omega| g (the gradient the reasons explain)."""
    signal = np.nan_to_num(x.signal.double().cpu().numpy(), nan=0.0)
    signal = np.where(signal > ZERO_SIGNAL, signal, 0.0)
    weight = np.nan_to_num(x.weight.double().cpu().numpy(), nan=0.0)
    grad = np.nan_to_num(x.grad_norm.double().cpu().numpy(), nan=0.0)
    return {"signal": signal, "weight": weight, "grad_norm": grad}, signal * weight * grad


def _log_ratio(a: float, b: float) -> float:
    """log a - log b with -inf/+inf where only one side is 0, and 0 where both are."""
    if a == b:
        return 0.0
    return a - b


@dataclass(frozen=True)
class Cut:
    """Where a method's selection stops: each token's rank within its scope (1 = kept first)
    and the id of that scope (the whole batch, a group, an answer), both (N,)."""

    ranks: torch.Tensor
    scope: torch.Tensor


def scope_ids(x: DifferenceInputs, scope: str) -> torch.Tensor:
    """Each token's scope id under ``scope`` (batch, group or answer)."""
    if scope == "batch":
        return torch.zeros_like(x.group_index)
    if scope == "group":
        return x.group_index.clone()
    span = int(x.answer_index.max()) + 1 if x.answer_index.numel() else 1
    return x.group_index * span + x.answer_index


def cut_tokens(
    x: DifferenceInputs, mine: torch.Tensor, other: torch.Tensor, cut: Cut | None = None
) -> np.ndarray:
    """For every token (N,), the flat index of ``other``'s cut token when ``mine`` selects it
    and ``other`` does not: of the tokens ``other`` selects in the token's scope, the one
    ``cut`` ranks last. Without ``cut``: the one of smallest w |omega| g (ties: the later) in
    the token's group, else in the batch. -1 where ``mine`` does not select the token alone,
    -2 where ``other`` keeps no token in its scope."""
    mine_np, other_np = mine.bool().cpu().numpy(), other.bool().cpu().numpy()
    n = mine_np.size
    out = np.full(n, -1, dtype=np.int64)
    alone = mine_np & ~other_np
    if not alone.any():
        return out
    if cut is None:
        proxy = _factors(x)[1]
        # rank by w |omega| g, highest first, ties by flat order: the last kept is the smallest
        order = np.lexsort((np.arange(n), -proxy))
        ranks = np.empty(n, dtype=np.int64)
        ranks[order] = np.arange(1, n + 1)
        scopes = x.group_index.cpu().numpy()
    else:
        ranks = cut.ranks.cpu().numpy().astype(np.int64)
        scopes = cut.scope.cpu().numpy()
    kept = np.flatnonzero(other_np)

    def last_kept(members: np.ndarray) -> int:
        return int(members[np.argmax(ranks[members])]) if members.size else -2

    batch_last = last_kept(kept)
    for s in np.unique(scopes[alone]).tolist():
        found = last_kept(kept[scopes[kept] == s])
        if found == -2 and cut is None:
            found = batch_last
        out[alone & (scopes == s)] = found
    return out


def _reason(d: dict[str, float], signal_t: float, signal_r: float, direction: int) -> str:
    """The reason key from the factors' log-ratios ``d`` (token over reference) and whether the
    token's gradient is smaller (-1), larger (+1) or equal (0) to the reference's."""
    if direction == 0:
        return "same_gradient"
    moving = sorted(
        ((v * direction, f) for f, v in d.items() if v * direction > EQUAL_LOG), reverse=True
    )
    if not moving:  # cannot happen when the gradients differ; kept for NaN inputs
        return "same_gradient"
    first, factor = moving[0]
    if len(moving) > 1 and math.isfinite(first) and moving[1][0] >= MIXED_SHARE * first:
        return "mixed"
    if factor == "weight":
        return "aggregation_weight"
    if factor == "signal":
        if direction < 0:
            return "zero_advantage" if signal_t <= ZERO_SIGNAL else "smaller_advantage"
        return "cut_zero_advantage" if signal_r <= ZERO_SIGNAL else "larger_advantage"
    return "low_gradient" if direction < 0 else "high_gradient"


def token_reasons(
    x: DifferenceInputs,
    selected_a: torch.Tensor,
    selected_b: torch.Tensor,
    cut_a: Cut | None = None,
    cut_b: Cut | None = None,
) -> tuple[list[str], list[int]]:
    """The reason key and the cut token (flat index; -1: none) of every token exactly one of
    the two selections (bool (N,) each) keeps, in flat order; ``cut_a``/``cut_b``: where each
    selection stops (None: by w |omega| g, see :func:`cut_tokens`)."""
    a, b = selected_a.bool().cpu(), selected_b.bool().cpu()
    ref = np.maximum(cut_tokens(x, a, b, cut_b), cut_tokens(x, b, a, cut_a))
    raw, proxy = _factors(x)
    signal = raw["signal"]
    factors = {f: _log(v) for f, v in raw.items()}
    keys, refs = [], []
    for i in (a ^ b).nonzero().flatten().tolist():
        r = int(ref[i])
        if r < 0:
            keys.append("no_cut")
            refs.append(-1)
            continue
        d = {f: _log_ratio(float(v[i]), float(v[r])) for f, v in factors.items()}
        big = max(abs(proxy[i]), abs(proxy[r]))
        gap = proxy[i] - proxy[r]
        direction = 0 if abs(gap) <= 3 * EQUAL_LOG * big else (1 if gap > 0 else -1)
        keys.append(_reason(d, float(signal[i]), float(signal[r]), direction))
        refs.append(r)
    return keys, refs


def explain(
    x: DifferenceInputs,
    method_a: str,
    selected_a: torch.Tensor,
    method_b: str,
    selected_b: torch.Tensor,
    cut_a: Cut | None = None,
    cut_b: Cut | None = None,
) -> Differences:
    """The tokens only one of two selections (bool (N,) each) keeps, grouped by reason; each
    compared with the other's cut (``cut_a``/``cut_b``, see :func:`token_reasons`)."""
    a, b = selected_a.bool().cpu(), selected_b.bool().cpu()
    keys, ref_of = token_reasons(x, a, b, cut_a, cut_b)
    idx = (a ^ b).nonzero().flatten().tolist()
    n_a, n_b = int(a.sum()), int(b.sum())
    zero_group = x.zero_signal_group.bool().cpu()
    g, ans, pos = ([*t.tolist(), -1] for t in (x.group_index, x.answer_index, x.position))
    by_reason: dict[str, list[int]] = {k: [] for k in REASON_KEYS}
    reference = dict(zip(idx, ref_of, strict=True))
    for i, k in zip(idx, keys, strict=True):
        by_reason[k].append(i)
    reasons = []
    for r in REASONS:
        members = by_reason[r.key]
        ca = sum(bool(a[i]) for i in members)
        cb = len(members) - ca
        refs = [
            TokenRef(
                g[i],
                ans[i],
                pos[i],
                method_a if a[i] else method_b,
                g[reference[i]],
                ans[reference[i]],
                pos[reference[i]],
            )
            for i in members
        ]
        reasons.append(
            ReasonCount(
                key=r.key,
                label=r.label,
                explanation=r.explanation,
                count=len(members),
                count_a=ca,
                count_b=cb,
                share_a=ca / n_a if n_a else 0.0,
                share_b=cb / n_b if n_b else 0.0,
                zero_signal_group=sum(bool(zero_group[i]) for i in members),
                tokens=refs,
            )
        )
    return Differences(
        method_a=method_a,
        method_b=method_b,
        selected_a=n_a,
        selected_b=n_b,
        both=int((a & b).sum()),
        only_a=int((a & ~b).sum()),
        only_b=int((b & ~a).sum()),
        reasons=reasons,
    )


def difference_inputs(result: AnalysisResult) -> DifferenceInputs:
    """The flat numbers of an analysis's token records (built if they are not yet)."""
    cols: dict[str, list[float]] = {k: [] for k in ("h", "g", "s", "w", "gi", "ai", "t", "z")}
    for group in result.groups:
        zero = all(ans.advantage == 0 for ans in group.answers)
        for ans in group.answers:
            for t in ans.tokens:
                if not t.trained:  # the loss never counted it: no reason is about it
                    continue
                coef = t.coef if math.isfinite(t.coef) else ans.advantage
                cols["h"].append(t.entropy)
                cols["g"].append(t.grad_norm)
                cols["s"].append(abs(coef))
                cols["w"].append(ans.weight)
                cols["gi"].append(group.index)
                cols["ai"].append(ans.index)
                cols["t"].append(t.position)
                cols["z"].append(zero)
    f = lambda k: torch.tensor(cols[k], dtype=torch.float64)  # noqa: E731
    i = lambda k: torch.tensor(cols[k], dtype=torch.long)  # noqa: E731
    return DifferenceInputs(
        entropy=f("h"),
        grad_norm=f("g"),
        signal=f("s"),
        weight=f("w"),
        group_index=i("gi"),
        answer_index=i("ai"),
        position=i("t"),
        zero_signal_group=torch.tensor(cols["z"], dtype=torch.bool),
    )


def _selection(
    result: AnalysisResult, method: str, x: DifferenceInputs
) -> tuple[torch.Tensor, Cut]:
    """The method's flags on the trained tokens (the order of :func:`difference_inputs`) and
    its cut: its ranks within the analysis's scope."""
    trained = None if result.inputs is None else result.inputs.trained
    scopes = scope_ids(x, result.config.scope)
    if method in result.selections:
        sel = result.selections[method]
        flags, ranks = sel.selected.cpu(), sel.ranks.cpu()
        if trained is not None:
            flags, ranks = flags[trained.cpu()], ranks[trained.cpu()]
        return flags, Cut(ranks, scopes)
    tokens = [t for g in result.groups for a in g.answers for t in a.tokens if t.trained]
    flags = torch.tensor([t.selected[method] for t in tokens], dtype=torch.bool)
    ranks = torch.tensor([t.ranks[method] for t in tokens], dtype=torch.long)
    return flags, Cut(ranks, scopes)


def why_they_differ(result: AnalysisResult, method_a: str, method_b: str) -> Differences:
    """Why ``method_a`` and ``method_b`` select different tokens in ``result``."""
    methods = list(result.config.methods)
    for m in (method_a, method_b):
        if m not in methods:
            raise ValueError(f"method {m!r} is not in this analysis; it has: {', '.join(methods)}")
    x = difference_inputs(result)
    (sa, ca), (sb, cb) = _selection(result, method_a, x), _selection(result, method_b, x)
    return explain(x, method_a, sa, method_b, sb, ca, cb)


def all_differences(result: AnalysisResult) -> list[Differences]:
    """:func:`why_they_differ` for every pair of the analysis's methods, in the order of the
    summary's ``overlap`` (``"a|b"`` for a before b in ``config.methods``); the token records
    are read once."""
    methods = list(result.config.methods)
    if len(methods) < 2:
        return []
    x = difference_inputs(result)
    sel = {m: _selection(result, m, x) for m in methods}
    return [
        explain(x, a, sel[a][0], b, sel[b][0], sel[a][1], sel[b][1])
        for i, a in enumerate(methods)
        for b in methods[i + 1 :]
    ]
