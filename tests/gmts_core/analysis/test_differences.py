"""Why two methods differ: hand-built batches in which each reason occurs, and an analysis."""

from __future__ import annotations

import pytest
import torch

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.analysis.differences import (
    REASON_KEYS,
    DifferenceInputs,
    all_differences,
    explain,
    token_reasons,
    why_they_differ,
)
from gmts_core.modeling import LoadedModel

F = torch.float64


def _inputs(rows: list[tuple[float, float, float, float, int, int]]) -> DifferenceInputs:
    """rows: (entropy, g, |A|, w, group, answer) per token; grad_proxy = w |A| g."""
    h, g, s, w, gi, ai = (list(c) for c in zip(*rows, strict=True))
    gt, st, wt = (torch.tensor(v, dtype=F) for v in (g, s, w))
    groups = torch.tensor(gi)
    zero = torch.tensor([bool((st[groups == k] == 0).all()) for k in gi])
    pos, seen = [], {}
    for key in zip(gi, ai, strict=True):
        pos.append(seen.get(key, 0))
        seen[key] = pos[-1] + 1
    return DifferenceInputs(
        entropy=torch.tensor(h, dtype=F),
        grad_norm=gt,
        grad_proxy=wt * st * gt,
        signal=st,
        weight=wt,
        group_index=groups,
        answer_index=torch.tensor(ai),
        position=torch.tensor(pos),
        zero_signal_group=zero,
    )


# A typical batch (|A| = 1, w = 0.1, g = 0.5, H = 1) plus one token per reason.
TYPICAL = [(1.0, 0.5, 1.0, 0.1, 1, a % 2) for a in range(8)]
ZERO = (3.0, 0.9, 0.0, 0.1, 0, 0)  # high entropy, zero-signal group
LOW_G = (2.5, 0.05, 1.0, 0.1, 1, 0)  # high entropy, the sampled token holds the mass
HIGH_G = (0.05, 0.9, 3.0, 0.1, 1, 1)  # confident token, large |A|
DILUTED = (2.0, 0.5, 1.0, 0.002, 2, 0)  # high entropy in a very long answer


def test_each_reason_occurs_once() -> None:
    x = _inputs([*TYPICAL, ZERO, LOW_G, HIGH_G, DILUTED])
    n = x.entropy.numel()
    which = torch.zeros(n, dtype=torch.bool)
    which[8:] = True
    assert token_reasons(x, which) == [
        "zero_advantage",
        "low_gradient",
        "high_gradient",
        "aggregation_weight",
    ]


def test_short_answer_weighted_up_is_aggregation_weight() -> None:
    short = (0.05, 0.5, 1.0, 1.0, 1, 1)  # low entropy, gradient high only through w
    x = _inputs([*TYPICAL, short])
    which = torch.zeros(9, dtype=torch.bool)
    which[8] = True
    assert token_reasons(x, which) == ["aggregation_weight"]


def test_small_but_nonzero_advantage_is_zero_advantage() -> None:
    small = (2.5, 0.5, 0.01, 0.1, 1, 0)
    x = _inputs([*TYPICAL, small])
    which = torch.zeros(9, dtype=torch.bool)
    which[8] = True
    assert token_reasons(x, which) == ["zero_advantage"]


def test_counts_and_shares_entropy_vs_gradient() -> None:
    x = _inputs([*TYPICAL, ZERO, LOW_G, HIGH_G, DILUTED])
    n = x.entropy.numel()
    # entropy keeps the 4 highest-entropy tokens; the gradient keeps the 4 highest w|A|g
    top = lambda v: torch.zeros(n, dtype=torch.bool).index_fill(  # noqa: E731
        0, torch.topk(v, 4).indices, True
    )
    by_h, by_grad = top(x.entropy), top(x.grad_proxy)
    d = explain(x, "entropy", by_h, "gmts", by_grad)
    assert (d.selected_a, d.selected_b) == (4, 4)
    assert d.only_a + d.both == 4 and d.only_b + d.both == 4
    reasons = {r.key: r for r in d.reasons}
    assert list(reasons) == list(REASON_KEYS)
    assert reasons["zero_advantage"].count_a == 1 and reasons["zero_advantage"].count_b == 0
    assert reasons["zero_advantage"].share_a == pytest.approx(1 / 4)
    assert reasons["zero_advantage"].zero_signal_group == 1
    assert reasons["low_gradient"].count_a == 1
    assert reasons["aggregation_weight"].count_a == 1
    # gmts keeps HIGH_G and, by flat order among equal scores, two typical tokens that entropy
    # ranks lower than their gradient
    assert reasons["high_gradient"].count_b == d.only_b == 3
    assert (1, 1, 4) in [(t.group, t.answer, t.position) for t in reasons["high_gradient"].tokens]
    assert sum(r.count for r in d.reasons) == d.only_a + d.only_b
    ref = reasons["zero_advantage"].tokens[0]
    assert (ref.group, ref.answer, ref.position, ref.selected_by) == (0, 0, 0, "entropy")
    assert reasons["high_gradient"].tokens[0].selected_by == "gmts"


def test_identical_selections_have_no_differences() -> None:
    x = _inputs([*TYPICAL, ZERO])
    sel = torch.tensor([True] * 4 + [False] * 5)
    d = explain(x, "a", sel, "b", sel.clone())
    assert d.only_a == d.only_b == 0 and d.both == 4
    assert all(r.count == 0 and r.tokens == [] for r in d.reasons)


def test_analysis_result_pairs(tiny_llama: LoadedModel) -> None:
    groups = [
        GroupInput("Q: 2+2=?", answers=["4", "four is it", "5"], rewards=[1.0, 1.0, 0.0]),
        GroupInput("Q: 1+1=?", answers=["2", "two"], rewards=[1.0, 1.0]),  # zero signal
    ]
    config = AnalysisConfig(methods=("entropy", "gmts", "random"), ratio=0.3)
    result = analyze(tiny_llama, groups, config)
    pairs = all_differences(result)
    assert [(d.method_a, d.method_b) for d in pairs] == [
        ("entropy", "gmts"),
        ("entropy", "random"),
        ("gmts", "random"),
    ]
    d = why_they_differ(result, "entropy", "gmts")
    assert d == pairs[0]
    flat = [t for g in result.groups for a in g.answers for t in a.tokens]
    assert d.only_a == sum(t.selected["entropy"] and not t.selected["gmts"] for t in flat)
    for r in d.reasons:
        for ref in r.tokens:
            tok = result.groups[ref.group].answers[ref.answer].tokens[ref.position]
            assert tok.selected[ref.selected_by]
            other = "gmts" if ref.selected_by == "entropy" else "entropy"
            assert not tok.selected[other]
            if result.groups[ref.group].summary["zero_signal"]:
                assert r.key == "zero_advantage"
    with pytest.raises(ValueError, match="entropy, gmts, random"):
        why_they_differ(result, "entropy", "surprisal")
