"""Ties: tokens whose next-token distributions are equal in exact arithmetic (shared prefixes)
get bit-equal statistics, and rank in (group, answer, position) order."""

from __future__ import annotations

import random

import pytest
import torch

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.model.loading import load_model
from gmts_core.stats.contexts import share_identical_contexts
from gmts_core.stats.forward import AnswerStats
from gmts_core.stats.metrics import TokenStats

# on the demo model the first token's entropy, computed with different sampled tokens split
# off, differs in the 8th digit unless the statistics are shared
ANSWERS = ["7+8=15 carry 1, answer 85", "7+8=15", " 7+9=16 so", "7+8=15 carry 1, answer 86"]


def test_shared_prefix_group_has_equal_statistics_and_ordered_ties() -> None:
    lm = load_model(DEMO_MODEL_DIR, device="cpu", dtype="float32")
    prompt = "Q: 47+38=?\nA:"
    groups = [
        GroupInput(prompt, answers=ANSWERS, rewards=[1.0, 0.0, 0.0, 1.0]),
        GroupInput(prompt, answers=ANSWERS[:2], rewards=[0.0, 1.0]),
    ]
    config = AnalysisConfig(methods=("entropy", "gmts"), ratio=0.5, top_alternatives=2)
    result = analyze(lm, groups, config)
    answers = [a for g in result.groups for a in g.answers]
    ids = [[t.id for t in a.tokens] for a in answers]
    # every pair of tokens predicted from the same context has bit-equal entropy (and the same
    # log-prob and g when the token is the same)
    first = {}
    checked = 0
    for a, (ans, tok_ids) in enumerate(zip(answers, ids, strict=True)):
        for t, tok in enumerate(ans.tokens):
            key = (result.groups[0].prompt, tuple(tok_ids[:t]))
            if key not in first:
                first[key] = (a, tok)
                continue
            a0, tok0 = first[key]
            checked += 1
            assert tok.entropy == tok0.entropy
            assert [x["id"] for x in tok.alternatives] == [x["id"] for x in tok0.alternatives]
            if tok.id == tok0.id:
                assert (tok.logprob, tok.grad_norm) == (tok0.logprob, tok0.grad_norm)
            # a tie in entropy ranks the earlier (group, answer, position) first
            assert tok.ranks["entropy"] > tok0.ranks["entropy"]
    assert checked >= 12  # the first tokens of all 6 answers, and the shared prefixes
    # the whole batch: equal entropies rank in flat (group, answer, position) order
    flat = [(t.entropy, t.ranks["entropy"]) for a in answers for t in a.tokens]
    for (h1, r1), (h2, r2) in zip(flat, flat[1:], strict=False):
        if h1 == h2:
            assert r1 < r2


def _naive_share(seqs: list[tuple[list[int], list[int]]], answers: list[AnswerStats]) -> None:
    """Copy each repeated context's statistics from its first occurrence, one token at a time."""
    first: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, int]] = {}
    for i, (prompt, answer) in enumerate(seqs):
        for t in range(len(answer)):
            key = (tuple(prompt), tuple(answer[:t]))
            if key not in first:
                first[key] = (i, t)
                continue
            a, s = first[key]
            names = ["entropy", "sum_sq_prob", "top_ids", "top_logprobs"]
            if seqs[a][1][s] == answer[t]:
                names += ["logprob", "grad_norm"]
            for name in names:
                getattr(answers[i].stats, name)[t] = getattr(answers[a].stats, name)[s]
            answers[i].hidden_norm[t] = answers[a].hidden_norm[s]


def _random_stats(seqs: list[tuple[list[int], list[int]]]) -> list[AnswerStats]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _, a in seqs:
        n = len(a)
        floats = [torch.randn(n, generator=g) for _ in range(4)]
        top = torch.randint(0, 9, (n, 3), generator=g), torch.randn(n, 3, generator=g)
        out.append(AnswerStats(TokenStats(*floats, *top), torch.randn(n, generator=g)))
    return out


def _as_views(answers: list[AnswerStats]) -> list[AnswerStats]:
    """The same statistics as slices of one flat tensor per field, as a forward splits them."""
    names = [f for f in TokenStats.__dataclass_fields__]
    flat = {n: torch.cat([getattr(a.stats, n) for a in answers]) for n in names}
    norms = torch.cat([a.hidden_norm for a in answers])
    out, start = [], 0
    for a in answers:
        sl = slice(start, start + len(a.hidden_norm))
        out.append(AnswerStats(TokenStats(*(flat[n][sl] for n in names)), norms[sl]))
        start = sl.stop
    return out


@pytest.mark.parametrize("layout", ["separate", "views"])
def test_shared_contexts_match_the_token_by_token_copy(layout: str) -> None:
    rng = random.Random(0)
    seqs = []
    for _ in range(5):  # groups with short prompts (two share one) and many shared prefixes
        prompt = [rng.randint(0, 1) for _ in range(rng.randint(1, 2))]
        seqs += [(prompt, [rng.randint(0, 2) for _ in range(rng.randint(1, 8))]) for _ in range(6)]
    fast, naive = _random_stats(seqs), _random_stats(seqs)
    if layout == "views":  # the copies are made within the flat tensors
        fast = _as_views(fast)
    share_identical_contexts(seqs, fast)
    _naive_share(seqs, naive)
    changed = 0
    for f, n, orig in zip(fast, naive, _random_stats(seqs), strict=True):
        torch.testing.assert_close(f.hidden_norm, n.hidden_norm, rtol=0, atol=0)
        for name in ("logprob", "entropy", "grad_norm", "sum_sq_prob", "top_ids", "top_logprobs"):
            torch.testing.assert_close(
                getattr(f.stats, name), getattr(n.stats, name), rtol=0, atol=0
            )
        changed += int((f.stats.entropy != orig.stats.entropy).sum())
    assert changed > 20  # the case exercises many copies
