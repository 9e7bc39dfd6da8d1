"""Why two methods differ: each reason on a hand-built batch, the properties the rule must keep
(every token is compared with the other method's cut token, found here independently from that
method's ranks and scope; a factor equal across the batch is never a reason; every reason's
factor differs from the cut token's in the stated direction) on random batches and on real
analyses (sampled, pasted, several groups; every scope, aggregation and advantage estimator) for
every pair of registered methods."""

from __future__ import annotations

import math

import pytest
import torch

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, RewardSpec, analyze
from gmts_core.analysis.difference_reasons import (
    EQUAL_LOG,
    REASON_KEYS,
    ZERO_SIGNAL,
    Cut,
    DifferenceInputs,
    Differences,
    all_differences,
    difference_inputs,
    explain,
    token_reasons,
    why_they_differ,
)
from gmts_core.methods.selection import METHODS, rank_and_select
from gmts_core.model.loading import LoadedModel
from gmts_core.sampling.answers import SamplingConfig

F = torch.float64
ADVANTAGE_KEYS = {"zero_advantage", "smaller_advantage", "larger_advantage"}
# the factor (and its direction: -1 the token's is smaller, +1 larger) each reason states
STATED = {
    "zero_advantage": ("signal", -1),
    "smaller_advantage": ("signal", -1),
    "larger_advantage": ("signal", +1),
    "cut_zero_advantage": ("signal", +1),
    "low_gradient": ("grad_norm", -1),
    "high_gradient": ("grad_norm", +1),
}


def _inputs(rows: list[tuple[float, float, float, float, int, int]]) -> DifferenceInputs:
    """rows: (entropy, g, |A|, w, group, answer) per token."""
    h, g, s, w, gi, ai = (list(c) for c in zip(*rows, strict=True))
    groups = torch.tensor(gi)
    st = torch.tensor(s, dtype=F)
    zero = torch.tensor([bool((st[groups == k] == 0).all()) for k in gi])
    pos, seen = [], {}
    for key in zip(gi, ai, strict=True):
        pos.append(seen.get(key, 0))
        seen[key] = pos[-1] + 1
    return DifferenceInputs(
        entropy=torch.tensor(h, dtype=F),
        grad_norm=torch.tensor(g, dtype=F),
        signal=st,
        weight=torch.tensor(w, dtype=F),
        group_index=groups,
        answer_index=torch.tensor(ai),
        position=torch.tensor(pos),
        zero_signal_group=zero,
    )


def _mask(n: int, on: list[int]) -> torch.Tensor:
    m = torch.zeros(n, dtype=torch.bool)
    m[on] = True
    return m


def _reasons(rows: list, a: list[int], b: list[int]) -> list[str]:
    x = _inputs(rows)
    n = x.entropy.numel()
    return token_reasons(x, _mask(n, a), _mask(n, b))[0]


# --- each reason on a hand-built pair (token 0 selected by A only, token 1 by B only) ----------


def test_the_issue_case_all_weights_equal_advantage_differs() -> None:
    """token_mean (every w 0.00476): entropy's pick sits in an answer with |A| = 0.724, GMTS's
    in one with |A| = 1.21. The reason is the advantage, never the (equal) weight."""
    w = 0.00476
    rows = [(2.0, 0.5, 0.724, w, 0, 0), (0.3, 0.5, 1.21, w, 0, 1)]
    assert _reasons(rows, [0], [1]) == ["smaller_advantage", "larger_advantage"]


@pytest.mark.parametrize(
    ("mine", "instead", "reasons"),
    [
        ((3.0, 0.9, 0.0, 0.1), (0.5, 0.5, 1.0, 0.1), ["zero_advantage", "cut_zero_advantage"]),
        ((2.5, 0.05, 1.0, 0.1), (0.5, 0.5, 1.0, 0.1), ["low_gradient", "high_gradient"]),
        ((2.0, 0.5, 1.0, 0.002), (0.5, 0.5, 1.0, 0.1), ["aggregation_weight"] * 2),
        ((2.0, 0.25, 0.5, 0.1), (0.5, 0.5, 1.0, 0.1), ["mixed", "mixed"]),  # |A| and g halved
        ((2.0, 0.5, 1.0, 0.1), (0.5, 0.5, 1.0, 0.1), ["same_gradient"] * 2),
        # opposite factors: |A| 4x smaller, g 2x larger; |A| is the reason for both
        ((2.0, 1.0, 0.25, 0.1), (0.5, 0.5, 1.0, 0.1), ["smaller_advantage", "larger_advantage"]),
    ],
)
def test_each_reason(
    mine: tuple[float, ...], instead: tuple[float, ...], reasons: list[str]
) -> None:
    rows = [(*mine, 0, 0), (*instead, 0, 1)]
    assert _reasons(rows, [0], [1]) == reasons


def test_the_reference_is_in_the_tokens_group_when_there_is_one() -> None:
    """Group 1's entropy-only token is compared with group 1's gmts-only token (same |A|, so
    not the advantage), not with group 0's zero-signal token."""
    rows = [
        (3.0, 0.9, 0.0, 0.1, 0, 0),  # entropy only, zero-signal group
        (2.5, 0.05, 1.0, 0.1, 1, 0),  # entropy only
        (0.2, 0.6, 1.0, 0.1, 1, 1),  # gmts only
    ]
    x = _inputs(rows)
    keys, refs = token_reasons(x, _mask(3, [0, 1]), _mask(3, [2]))
    assert keys == ["zero_advantage", "low_gradient", "high_gradient"]
    assert refs == [2, 2, 1]


def test_counts_shares_and_references() -> None:
    rows = [
        (3.0, 0.9, 0.0, 0.1, 0, 0),  # 0: entropy only (zero-signal group)
        (0.2, 0.9, 3.0, 0.1, 1, 1),  # 1: gmts only
        (1.0, 0.5, 1.0, 0.1, 1, 0),  # 2: both
        (2.5, 0.05, 3.0, 0.1, 1, 1),  # 3: entropy only, same |A| as token 1
    ]
    x = _inputs(rows)
    d = explain(x, "entropy", _mask(4, [0, 2, 3]), "gmts", _mask(4, [1, 2]))
    assert (d.selected_a, d.selected_b, d.both, d.only_a, d.only_b) == (3, 2, 1, 2, 1)
    reasons = {r.key: r for r in d.reasons}
    assert list(reasons) == list(REASON_KEYS)
    assert reasons["zero_advantage"].count_a == 1 and reasons["zero_advantage"].count_b == 0
    assert reasons["zero_advantage"].share_a == pytest.approx(1 / 3)
    assert reasons["zero_advantage"].zero_signal_group == 1
    assert reasons["low_gradient"].count_a == 1
    ref = reasons["zero_advantage"].tokens[0]
    assert (ref.group, ref.answer, ref.position, ref.selected_by) == (0, 0, 0, "entropy")
    # gmts keeps nothing in group 0: its cut over the batch, its smallest w|A|g (token 2)
    assert (ref.reference_group, ref.reference_answer, ref.reference_position) == (1, 0, 0)
    # gmts's token 1 is compared with the entropy-only token of its own group (token 3)
    (high,) = reasons["high_gradient"].tokens
    assert high.selected_by == "gmts" and (high.reference_answer, high.reference_position) == (1, 1)
    assert sum(r.count for r in d.reasons) == d.only_a + d.only_b


def test_identical_selections_have_no_differences() -> None:
    x = _inputs([(1.0, 0.5, 1.0, 0.1, 0, a % 2) for a in range(6)])
    sel = _mask(6, [0, 1, 2])
    d = explain(x, "a", sel, "b", sel.clone())
    assert d.only_a == d.only_b == 0 and d.both == 3
    assert all(r.count == 0 and r.tokens == [] for r in d.reasons)


# --- the properties, on random batches ----------------------------------------------------------


def _factor_table(x: DifferenceInputs) -> dict[str, list[float]]:
    s = x.signal.double()
    return {
        "signal": torch.where(s > ZERO_SIGNAL, s, torch.zeros_like(s)).tolist(),
        "weight": x.weight.double().tolist(),
        "grad_norm": x.grad_norm.double().tolist(),
    }


def _flat_index(x: DifferenceInputs) -> dict[tuple[int, int, int], int]:
    keys = zip(x.group_index.tolist(), x.answer_index.tolist(), x.position.tolist(), strict=True)
    return {k: i for i, k in enumerate(keys)}


# per method: (selected flags, ranks within its scope, scope id), lists in flat order
Cuts = dict[str, tuple[list[bool], list[int], list[int]]]


def _cut_of(cuts: Cuts, method: str, i: int) -> int | None:
    """The other method's cut token for token i, found from its ranks: of the tokens it keeps
    in i's scope, the one it ranks last (None: it keeps none there)."""
    kept, ranks, scope = cuts[method]
    there = [k for k in range(len(kept)) if kept[k] and scope[k] == scope[i]]
    return max(there, key=lambda k: ranks[k]) if there else None


def assert_reasons_are_true(x: DifferenceInputs, d: Differences, cuts: Cuts | None = None) -> int:
    """Every token is compared with the other method's cut token (checked against ``cuts``
    where given), its stated factor differs from the cut token's in the stated direction, and
    a factor equal between the two is never the reason. Returns how many tokens were checked."""
    f = _factor_table(x)
    where = _flat_index(x)
    checked = 0

    def log_ratio(name: str, i: int, r: int) -> float:
        a, b = f[name][i], f[name][r]
        if a == b:
            return 0.0
        return (math.log(a) if a > 0 else -math.inf) - (math.log(b) if b > 0 else -math.inf)

    for reason in d.reasons:
        for t in reason.tokens:
            checked += 1
            i = where[(t.group, t.answer, t.position)]
            other = d.method_b if t.selected_by == d.method_a else d.method_a
            if reason.key == "no_cut":
                assert t.reference_group == t.reference_answer == t.reference_position == -1
                if cuts is not None:
                    assert _cut_of(cuts, other, i) is None, (d.method_a, d.method_b, i)
                continue
            r = where[(t.reference_group, t.reference_answer, t.reference_position)]
            assert i != r
            if cuts is not None:
                assert r == _cut_of(cuts, other, i), (d.method_a, d.method_b, i, r)
            product = [f["signal"][k] * f["weight"][k] * f["grad_norm"][k] for k in (i, r)]
            if reason.key in STATED:
                name, sign = STATED[reason.key]
                assert sign * log_ratio(name, i, r) > EQUAL_LOG, (reason.key, i, r)
                assert sign * (product[0] - product[1]) > 0, (reason.key, i, r)
                if reason.key == "cut_zero_advantage":
                    assert f["signal"][r] == 0 < f["signal"][i]
                if reason.key == "larger_advantage":
                    assert f["signal"][r] > 0
            elif reason.key == "aggregation_weight":
                assert abs(log_ratio("weight", i, r)) > EQUAL_LOG, (i, r)
                sign = 1 if product[0] > product[1] else -1
                assert sign * log_ratio("weight", i, r) > EQUAL_LOG
            elif reason.key == "mixed":
                sign = 1 if product[0] > product[1] else -1
                moved = [n for n in f if sign * log_ratio(n, i, r) > EQUAL_LOG]
                assert len(moved) >= 2, (i, r)
            else:
                assert reason.key == "same_gradient"
                assert product[0] == pytest.approx(product[1], rel=1e-4, abs=0)
    return checked


def _random_batch(
    gen: torch.Generator, equal_weight: bool, equal_signal: bool
) -> tuple[DifferenceInputs, dict[str, torch.Tensor]]:
    rows = []
    groups = int(torch.randint(1, 5, (1,), generator=gen))
    for g in range(groups):
        zero = bool(torch.rand(1, generator=gen) < 0.25) and not equal_signal
        for a in range(int(torch.randint(1, 5, (1,), generator=gen))):
            length = int(torch.randint(1, 12, (1,), generator=gen))
            adv = 0.0 if zero else (1.0 if equal_signal else float(torch.rand(1, generator=gen)))
            w = 0.01 if equal_weight else 1.0 / length
            for _ in range(length):
                h, gn = (float(v) for v in torch.rand(2, generator=gen) * torch.tensor([3, 1.4]))
                rows.append((h, gn, adv, w, g, a))
    x = _inputs(rows)
    scores = {
        "entropy": x.entropy,
        "gradient": x.signal * x.weight * x.grad_norm,
        "random": torch.rand(len(rows), generator=gen, dtype=F),
    }
    return x, scores


@pytest.mark.parametrize("seed", range(40))
def test_random_batches_keep_the_properties(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for equal_weight, equal_signal in [(True, False), (False, True), (False, False)]:
        x, scores = _random_batch(gen, equal_weight, equal_signal)
        scope = ["batch", "group"][seed % 2]
        ids = x.group_index if scope == "group" else torch.zeros_like(x.group_index)
        sel, cut, cuts = {}, {}, {}
        for m, v in scores.items():
            ranks, sel[m] = rank_and_select(v, ids, 0.3)
            cut[m] = Cut(ranks, ids)
            cuts[m] = (sel[m].tolist(), ranks.tolist(), ids.tolist())
        for a, b in [("entropy", "gradient"), ("random", "gradient"), ("entropy", "random")]:
            d = explain(x, a, sel[a], b, sel[b], cut[a], cut[b])
            assert_reasons_are_true(x, d, cuts)
            found = {r.key for r in d.reasons if r.count}
            assert "no_cut" not in found  # top-k keeps at least one token in every scope
            if equal_weight:
                assert "aggregation_weight" not in found
            if equal_signal:  # every |A| is 1
                assert found.isdisjoint(ADVANTAGE_KEYS)
            # without the ranks (a logged mask) the cut is the smallest gradient kept
            assert_reasons_are_true(x, explain(x, a, sel[a], b, sel[b]))


# --- the properties on real analyses, every pair of registered methods -------------------------


def _result_cuts(result: object) -> Cuts:
    """Each method's flags, ranks and scope ids over the trained tokens, from the token records
    (not from the code under test)."""
    scope = result.config.scope  # type: ignore[attr-defined]
    tokens = [
        (g.index, a.index, t)
        for g in result.groups  # type: ignore[attr-defined]
        for a in g.answers
        for t in a.tokens
        if t.trained
    ]
    scope_of = {
        "batch": lambda g, a: 0,
        "group": lambda g, a: g,
        "answer": lambda g, a: (g, a),
    }[scope]
    ids = {k: n for n, k in enumerate(dict.fromkeys(scope_of(g, a) for g, a, _ in tokens))}
    return {
        m: (
            [t.selected[m] for _, _, t in tokens],
            [t.ranks[m] for _, _, t in tokens],
            [ids[scope_of(g, a)] for g, a, _ in tokens],
        )
        for m in result.config.methods  # type: ignore[attr-defined]
    }


def _check_every_pair(result: object, equal_weight: bool, equal_signal: bool) -> int:
    """The properties for every pair of the result's methods; returns the tokens checked."""
    x = difference_inputs(result)  # type: ignore[arg-type]
    cuts = _result_cuts(result)
    checked = 0
    for d in all_differences(result):  # type: ignore[arg-type]
        checked += assert_reasons_are_true(x, d, cuts)
        found = {r.key for r in d.reasons if r.count}
        if equal_weight:
            assert "aggregation_weight" not in found, (d.method_a, d.method_b)
        if equal_signal:
            assert found.isdisjoint(ADVANTAGE_KEYS), (d.method_a, d.method_b)
    return checked


@pytest.mark.parametrize(
    ("aggregation", "advantage", "scope"),
    [
        ("token_mean", "grpo", "batch"),
        ("seq_mean_token_mean", "rloo", "group"),
        ("seq_mean_token_sum_norm", "dr_grpo", "answer"),
    ],
)
def test_sampled_groups_every_pair_of_methods(
    tiny_llama: LoadedModel, aggregation: str, advantage: str, scope: str
) -> None:
    groups = [
        GroupInput(
            f"Q: {a}+{b}=?",
            sampling=SamplingConfig(num_samples=4, max_new_tokens=8, seed=a),
            reward=RewardSpec("numeric", str(a + b)),
        )
        for a, b in [(47, 38), (12, 5), (3, 9)]
    ]
    config = AnalysisConfig(
        methods=tuple(METHODS.names()),
        ratio=0.3,
        scope=scope,
        loss_aggregation=aggregation,
        advantage=advantage,
    )
    result = analyze(tiny_llama, groups, config)
    assert _check_every_pair(result, equal_weight=aggregation == "token_mean", equal_signal=False)


def test_pasted_balanced_groups_every_pair_of_methods(tiny_llama: LoadedModel) -> None:
    """Every group half right, half wrong: every |A| is equal (grpo), and token_mean makes every
    w equal: no token is explained by the advantage or the weight."""
    groups = [
        GroupInput("Q: 2+2=?", answers=["4", "5 is it", "four", "22"], rewards=[1, 0, 1, 0]),
        GroupInput("Q: 3+5=?", answers=["8 ok", "9", "35", "eight"], rewards=[1, 0, 0, 1]),
    ]
    config = AnalysisConfig(
        methods=tuple(METHODS.names()), ratio=0.4, scope="batch", loss_aggregation="token_mean"
    )
    result = analyze(tiny_llama, groups, config)
    advantages = {abs(a.advantage) for g in result.groups for a in g.answers}
    assert max(advantages) - min(advantages) < 1e-6  # the premise: every |A| equal
    assert _check_every_pair(result, equal_weight=True, equal_signal=True)


def test_batch_with_a_zero_signal_group_every_pair_of_methods(tiny_llama: LoadedModel) -> None:
    """A pasted batch with a zero-signal group, per-group cuts: a token is never said to have a
    larger advantage than a cut token whose A is 0 (that is ``cut_zero_advantage``), and where
    the other method keeps nothing in the group (gmts_paper_verl keeps no score-0 token) the
    label says so."""
    groups = [
        GroupInput("Q: 12+13=?", answers=["25", "24 it is", "25 ok"], rewards=[1, 0, 1]),
        GroupInput("Q: 1+1=?", answers=["2", "two", "2 yes"], rewards=[1, 1, 1]),
        GroupInput("Q: 4+4=?", answers=["8", "9", "44 or so"], rewards=[1, 0, 0]),
    ]
    for scope in ("batch", "group"):
        config = AnalysisConfig(methods=tuple(METHODS.names()), ratio=0.3, scope=scope)
        result = analyze(tiny_llama, groups, config)
        assert _check_every_pair(result, equal_weight=True, equal_signal=False)
    found = {
        r.key
        for d in all_differences(result)
        if "gmts_paper_verl" in (d.method_a, d.method_b)
        for r in d.reasons
        if r.count
    }
    assert "no_cut" in found


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
