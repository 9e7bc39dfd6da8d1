"""Why two selection methods differ: the tokens only one of them selects, grouped by the reason
their numbers give.

A token's exact logit-gradient norm in the GRPO loss is  grad_proxy = w_i |omega_t| g_t
(``gmts_core.methods.coefficient``; on-policy without KL, |omega_t| = |A_i|): the answer's
aggregation weight, its advantage and the token's gradient norm g = ||e_y - p|| / tau. Entropy
H_t sees none of the first two and only part of the third. So a token that one method keeps and
the other leaves out is explained by the factor of  w |omega| g  that sets it apart from the
batch's typical trained token:

* ``zero_advantage`` -- its answer's advantage is 0 (a zero-signal group, where every reward is
  equal) or near 0: its gradient is ~0 however uncertain the model is there;
* ``low_gradient`` -- low gradient despite high entropy: the sampled token holds much of its
  distribution's mass, so g is small while the spread of the other tokens keeps H high;
* ``high_gradient`` -- high gradient despite low entropy: a confident token in an answer with a
  large |A| (or a surprising token, low p, in a peaked distribution);
* ``aggregation_weight`` -- the loss aggregation's weight w_i (1/L_i for ``sample``: long
  answers diluted, short ones weighted up) moves it across the threshold.

The rule, for a token selected by exactly one method: if its |omega| is ~0 the reason is
``zero_advantage``. Otherwise compare its percentile in the batch by entropy with its
percentile by grad_proxy. Where entropy ranks it higher, the reason is the factor among
log|omega|, log w, log g furthest *below* the median of the batch's tokens with a gradient
(|omega| -> ``zero_advantage``, w -> ``aggregation_weight``, g -> ``low_gradient``); where the
gradient ranks it higher, the factor furthest *above* (w -> ``aggregation_weight``, |omega| or
g -> ``high_gradient``). The rule reads only the numbers, so it explains any two methods
(entropy vs gmts, random vs gmts_paper, ...) in the same terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from gmts_core.analysis.records import AnalysisResult

# |omega| (|A| on-policy) at or below this counts as zero: advantages are in reward-std units
ZERO_SIGNAL = 1e-6


@dataclass(frozen=True)
class Reason:
    """One reason a token can be selected by only one method."""

    key: str
    label: str
    explanation: str


REASONS: tuple[Reason, ...] = (
    Reason(
        "zero_advantage",
        "zero (or small) advantage",
        "Its answer's advantage A is 0 or near 0 (in a zero-signal group every reward is "
        "equal), so its gradient w·|A|·g is ~0 however high its entropy: selecting it "
        "spends budget that cannot move the model.",
    ),
    Reason(
        "low_gradient",
        "low gradient despite high entropy",
        "The sampled token holds much of its distribution's mass (p near its top), so its "
        "gradient norm g = ‖e_y − p‖ is small while the spread of the other tokens keeps "
        "the entropy H high.",
    ),
    Reason(
        "high_gradient",
        "high gradient despite low entropy",
        "A confident (low-entropy) token in an answer with a large |A| (or a surprising, "
        "low-p token): its gradient w·|A|·g is large while its entropy is low.",
    ),
    Reason(
        "aggregation_weight",
        "aggregation weight",
        "The loss aggregation's answer weight w (1/L for 'sample': long answers diluted, "
        "short ones weighted up) moves the token across the selection threshold.",
    ),
)
REASON_KEYS = tuple(r.key for r in REASONS)


@dataclass
class DifferenceInputs:
    """Flat per-token numbers of a batch, all (N,), in (group, answer, position) order."""

    entropy: torch.Tensor  # H, nats
    grad_norm: torch.Tensor  # g = ||d log pi_y / d z||
    grad_proxy: torch.Tensor  # w |omega| g
    signal: torch.Tensor  # |omega| (|A| on-policy without KL)
    weight: torch.Tensor  # w of the token's answer
    group_index: torch.Tensor  # int64
    answer_index: torch.Tensor  # int64, index of the answer within its group
    position: torch.Tensor  # int64, position within the answer
    zero_signal_group: torch.Tensor  # bool: the token's group has equal rewards


@dataclass(frozen=True)
class TokenRef:
    """Where a token is (for click-through) and which of the two methods selected it."""

    group: int
    answer: int
    position: int
    selected_by: str


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


def _percentile(v: np.ndarray) -> np.ndarray:
    """Average-rank percentile in (0, 1] of every value (ties share their rank)."""
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    last = np.cumsum(counts).astype(np.float64)
    return (last - (counts - 1) / 2.0)[inverse.reshape(-1)] / max(v.size, 1)


def token_reasons(x: DifferenceInputs, which: torch.Tensor) -> list[str]:
    """The reason key of every token flagged in ``which`` (bool (N,)), in flat order."""
    signal, w, g = (t.double().cpu().numpy() for t in (x.signal, x.weight, x.grad_norm))
    proxy = x.grad_proxy.double().cpu().numpy()
    entropy = np.nan_to_num(x.entropy.double().cpu().numpy(), nan=0.0)
    live = (signal > ZERO_SIGNAL) & (w > 0) & (g > 0)
    # medians of the factors over the tokens that carry a gradient: the batch's typical token
    logs = [np.log(np.where(live, f, 1.0)) for f in (signal, w, g)]
    medians = [float(np.median(lf[live])) if live.any() else 0.0 for lf in logs]
    h_pct, p_pct = _percentile(entropy), _percentile(np.nan_to_num(proxy, nan=0.0))
    out = []
    for i in which.nonzero().flatten().tolist():
        if not live[i] and signal[i] <= ZERO_SIGNAL:
            out.append("zero_advantage")
            continue
        if not live[i]:  # w or g exactly 0: the factor that vanishes
            out.append("aggregation_weight" if w[i] <= 0 else "low_gradient")
            continue
        d_signal, d_w, d_g = (lf[i] - m for lf, m in zip(logs, medians, strict=True))
        if h_pct[i] >= p_pct[i]:  # entropy favours it more than its gradient does
            low = min(
                (d_signal, "zero_advantage"), (d_w, "aggregation_weight"), (d_g, "low_gradient")
            )
            out.append(low[1])
        else:
            high = max(
                (d_w, "aggregation_weight"), (d_signal, "high_gradient"), (d_g, "high_gradient")
            )
            out.append(high[1])
    return out


def explain(
    x: DifferenceInputs,
    method_a: str,
    selected_a: torch.Tensor,
    method_b: str,
    selected_b: torch.Tensor,
) -> Differences:
    """The tokens only one of two selections (bool (N,) each) keeps, grouped by reason."""
    a, b = selected_a.bool().cpu(), selected_b.bool().cpu()
    only = a ^ b
    keys = token_reasons(x, only)
    idx = only.nonzero().flatten().tolist()
    n_a, n_b = int(a.sum()), int(b.sum())
    zero_group = x.zero_signal_group.bool().cpu()
    g, ans, pos = (t.tolist() for t in (x.group_index, x.answer_index, x.position))
    by_reason: dict[str, list[int]] = {k: [] for k in REASON_KEYS}
    for i, k in zip(idx, keys, strict=True):
        by_reason[k].append(i)
    reasons = []
    for r in REASONS:
        members = by_reason[r.key]
        ca = sum(bool(a[i]) for i in members)
        cb = len(members) - ca
        refs = [TokenRef(g[i], ans[i], pos[i], method_a if a[i] else method_b) for i in members]
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
    cols: dict[str, list[float]] = {k: [] for k in ("h", "g", "p", "s", "w", "gi", "ai", "t", "z")}
    for group in result.groups:
        zero = all(ans.advantage == 0 for ans in group.answers)
        for ans in group.answers:
            for t in ans.tokens:
                coef = t.coef if math.isfinite(t.coef) else ans.advantage
                cols["h"].append(t.entropy)
                cols["g"].append(t.grad_norm)
                cols["p"].append(t.grad_proxy)
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
        grad_proxy=f("p"),
        signal=f("s"),
        weight=f("w"),
        group_index=i("gi"),
        answer_index=i("ai"),
        position=i("t"),
        zero_signal_group=torch.tensor(cols["z"], dtype=torch.bool),
    )


def _selected(result: AnalysisResult, method: str) -> torch.Tensor:
    if method in result.selections:
        return result.selections[method].selected
    flags = [t.selected[method] for g in result.groups for a in g.answers for t in a.tokens]
    return torch.tensor(flags, dtype=torch.bool)


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
