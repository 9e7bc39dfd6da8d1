"""Why two selection methods differ: the tokens only one of them selects, grouped by the factor
that actually moves each one across the other method's cut.

A token's exact logit-gradient norm in the GRPO loss is  grad_proxy = w |omega_t| g_t
(``gmts_core.methods.coefficient``; on-policy without KL, |omega_t| = |A_i|): the answer's
aggregation weight, its advantage and the token's gradient norm g = ||e_y - p|| / tau. Entropy
H_t sees none of the first two and only part of the third.

The rule, for a token t that method X selects and method Y does not: t is compared with the
**reference token** r, the token Y selects *instead* -- of the tokens Y selects and X does not,
those in t's group (else in the batch; else Y's selected tokens; else the batch), the one with
the median w |omega| g. Each factor's log-ratio d_f = log f_t - log f_r (f in |omega|, w, g) says
how that factor sets t apart from r:

* t's gradient is smaller than r's: the factor with the most negative d_f is the reason --
  ``zero_advantage`` (|omega_t| is 0, r's is not: a zero-signal group), ``smaller_advantage``,
  ``aggregation_weight`` or ``low_gradient`` (the sampled token holds more of the mass);
* t's gradient is larger: the factor with the largest positive d_f -- ``larger_advantage``,
  ``aggregation_weight`` or ``high_gradient`` (a less expected sampled token);
* ``mixed`` when the runner-up factor moves t in the same direction by at least half as much;
* ``same_gradient`` when w |omega| g is equal: the gradient cannot tell t from r, the other
  method's own score (entropy, a random draw, a tie rule) decides.

A factor whose d_f is within ``EQUAL_LOG`` of 0 is never a reason, so a factor equal across the
batch (w under ``token_mean``, |A| when every answer's is the same) is never named. The rule
reads only the numbers, so it explains any two methods (entropy vs gmts, random vs gmts_paper,
a trainer's logged mask vs gmts, ...) in the same terms; every token carries its reference
(:class:`TokenRef`), so a reader can check each stated reason against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from gmts_core.analysis.records import AnalysisResult

# |omega| (|A| on-policy) at or below this counts as zero: advantages are in reward-std units
ZERO_SIGNAL = 1e-6
# factors whose log-ratio is within this of 0 are equal (float32 rounding of equal values)
EQUAL_LOG = 1e-5
# the runner-up factor makes a case ``mixed`` when it moves the token at least this share as far
MIXED_SHARE = 0.5


@dataclass(frozen=True)
class Reason:
    """One reason a token can be selected by only one method."""

    key: str
    label: str
    explanation: str


REASONS: tuple[Reason, ...] = (
    Reason(
        "zero_advantage",
        "zero advantage",
        "Its answer's advantage A is 0 (a zero-signal group, where every reward is equal) "
        "while the token picked instead has one: its gradient w·|A|·g is 0 however high its "
        "entropy, so selecting it spends budget that cannot move the model.",
    ),
    Reason(
        "smaller_advantage",
        "smaller advantage",
        "Its answer's |A| is smaller than that of the token picked instead (its reward is "
        "nearer the group's mean), so its gradient w·|A|·g is smaller, however high its "
        "entropy.",
    ),
    Reason(
        "larger_advantage",
        "larger advantage",
        "Its answer's |A| is larger than that of the token picked instead (its reward is far "
        "from the group's mean), so even a confident, low-entropy token there carries a large "
        "gradient w·|A|·g.",
    ),
    Reason(
        "low_gradient",
        "smaller gradient norm g",
        "The sampled token holds more of its distribution's mass than the token picked "
        "instead, so g = ‖e_y − p‖ is smaller, while the spread of the other tokens can keep "
        "its entropy H high.",
    ),
    Reason(
        "high_gradient",
        "larger gradient norm g",
        "The sampled token was less expected (lower p of the token drawn) than the token "
        "picked instead, so g = ‖e_y − p‖ is larger, even where the entropy is low.",
    ),
    Reason(
        "aggregation_weight",
        "aggregation weight",
        "The loss aggregation weighs its answer differently from the token picked instead "
        "(w = 1/L for 'sample': long answers diluted, short ones weighted up), and that moves "
        "it across the other method's cut.",
    ),
    Reason(
        "mixed",
        "several factors together",
        "Two of w, |A| and g set it apart from the token picked instead by comparable "
        "amounts, in the same direction; no single factor is the reason.",
    ),
    Reason(
        "same_gradient",
        "equal gradient",
        "Its gradient w·|A|·g equals that of the token picked instead, so the gradient cannot "
        "tell them apart: the other method's own score (entropy, a random draw, a tie rule) "
        "decides.",
    ),
)
REASON_KEYS = tuple(r.key for r in REASONS)


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
    its reference token is (the token the other method selects instead, the one it is compared
    with)."""

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


def reference_tokens(x: DifferenceInputs, mine: torch.Tensor, other: torch.Tensor) -> np.ndarray:
    """For every token (N,), the flat index of the token compared with it when ``mine`` selects
    it and ``other`` does not: of the tokens ``other`` selects and ``mine`` does not, those in
    its group (else in the batch; else ``other``'s selected tokens; else the batch), the one of
    median w |omega| g (the lower median; ties by flat order). -1 where ``mine`` does not select
    the token alone."""
    mine_np, other_np = mine.bool().cpu().numpy(), other.bool().cpu().numpy()
    proxy = _factors(x)[1]
    groups = x.group_index.cpu().numpy()
    n = proxy.size
    out = np.full(n, -1, dtype=np.int64)
    alone = mine_np & ~other_np
    if not alone.any():
        return out

    def median_of(members: np.ndarray) -> int:
        order = members[np.lexsort((members, proxy[members]))]
        return int(order[(order.size - 1) // 2])

    instead = other_np & ~mine_np
    fallback = next(
        (m for m in (instead, other_np, np.ones(n, dtype=bool)) if m.any()),
        np.ones(n, dtype=bool),
    )
    batch_ref = median_of(np.flatnonzero(fallback))
    for g in np.unique(groups[alone]).tolist():
        in_group = groups == g
        members = np.flatnonzero(instead & in_group)
        out[alone & in_group] = median_of(members) if members.size else batch_ref
    return out


def _reason(d: dict[str, float], signal_t: float, direction: int) -> str:
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
        return "larger_advantage"
    return "low_gradient" if direction < 0 else "high_gradient"


def token_reasons(
    x: DifferenceInputs, selected_a: torch.Tensor, selected_b: torch.Tensor
) -> tuple[list[str], list[int]]:
    """The reason key and the reference token (flat index) of every token exactly one of the
    two selections (bool (N,) each) keeps, in flat order."""
    a, b = selected_a.bool().cpu(), selected_b.bool().cpu()
    ref = np.maximum(reference_tokens(x, a, b), reference_tokens(x, b, a))
    raw, proxy = _factors(x)
    signal = raw["signal"]
    factors = {f: _log(v) for f, v in raw.items()}
    keys, refs = [], []
    for i in (a ^ b).nonzero().flatten().tolist():
        r = int(ref[i])
        d = {f: _log_ratio(float(v[i]), float(v[r])) for f, v in factors.items()}
        big = max(abs(proxy[i]), abs(proxy[r]))
        gap = proxy[i] - proxy[r]
        direction = 0 if abs(gap) <= 3 * EQUAL_LOG * big else (1 if gap > 0 else -1)
        keys.append(_reason(d, float(signal[i]), direction))
        refs.append(r)
    return keys, refs


def explain(
    x: DifferenceInputs,
    method_a: str,
    selected_a: torch.Tensor,
    method_b: str,
    selected_b: torch.Tensor,
) -> Differences:
    """The tokens only one of two selections (bool (N,) each) keeps, grouped by reason."""
    a, b = selected_a.bool().cpu(), selected_b.bool().cpu()
    keys, ref_of = token_reasons(x, a, b)
    idx = (a ^ b).nonzero().flatten().tolist()
    n_a, n_b = int(a.sum()), int(b.sum())
    zero_group = x.zero_signal_group.bool().cpu()
    g, ans, pos = (t.tolist() for t in (x.group_index, x.answer_index, x.position))
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


def _selected(result: AnalysisResult, method: str) -> torch.Tensor:
    """The method's flags on the trained tokens (the order of :func:`difference_inputs`)."""
    trained = None if result.inputs is None else result.inputs.trained
    if method in result.selections:
        flags = result.selections[method].selected
        return flags if trained is None else flags[trained]
    tokens = (t for g in result.groups for a in g.answers for t in a.tokens if t.trained)
    return torch.tensor([t.selected[method] for t in tokens], dtype=torch.bool)


def why_they_differ(result: AnalysisResult, method_a: str, method_b: str) -> Differences:
    """Why ``method_a`` and ``method_b`` select different tokens in ``result``."""
    methods = list(result.config.methods)
    for m in (method_a, method_b):
        if m not in methods:
            raise ValueError(f"method {m!r} is not in this analysis; it has: {', '.join(methods)}")
    x = difference_inputs(result)
    return explain(x, method_a, _selected(result, method_a), method_b, _selected(result, method_b))


def all_differences(result: AnalysisResult) -> list[Differences]:
    """:func:`why_they_differ` for every pair of the analysis's methods, in the order of the
    summary's ``overlap`` (``"a|b"`` for a before b in ``config.methods``); the token records
    are read once."""
    methods = list(result.config.methods)
    if len(methods) < 2:
        return []
    x = difference_inputs(result)
    sel = {m: _selected(result, m) for m in methods}
    return [
        explain(x, a, sel[a], b, sel[b]) for i, a in enumerate(methods) for b in methods[i + 1 :]
    ]
