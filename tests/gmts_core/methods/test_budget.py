"""What a selection's budget counts (``budget_over``): on random batches with a loss mask and
special tokens, each rule's k per scope and its selection against the plain top-k rule written
out here (the candidates' top ceil(ratio * counted) by score, in flat order on ties)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from gmts_core.analysis.analyze import analyze
from gmts_core.analysis.inputs import GroupInput
from gmts_core.config import AnalysisConfig
from gmts_core.errors import InvalidInputError
from gmts_core.methods.budget import BUDGET_OVER, special_ids, special_mask, with_budget
from gmts_core.methods.selection import SelectionInputs, select, selection_budget


def random_inputs(seed: int) -> tuple[SelectionInputs, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 12, (6,), generator=g)
    answer = torch.repeat_interleave(torch.arange(6), lengths)
    n = int(lengths.sum())
    entropy = torch.rand(n, generator=g, dtype=torch.float64)
    x = SelectionInputs(
        entropy=entropy,
        logprob=-entropy,
        grad_norm=torch.rand(n, generator=g, dtype=torch.float64),
        grad_proxy=torch.rand(n, generator=g, dtype=torch.float64),
        signal_scale=torch.ones(n, dtype=torch.float64),
        answer_index=answer,
        group_index=answer // 3,
        trained=torch.rand(n, generator=g) > 0.25,
    )
    return x, torch.rand(n, generator=g) < 0.2  # the special tokens


def expected(x: SelectionInputs, ratio: float, chosen: torch.Tensor, counted: torch.Tensor):
    """The top ceil(ratio * counted) candidates of each group by entropy (ties: flat order)."""
    keep = torch.zeros(x.num_tokens, dtype=torch.bool)
    for s in x.group_index.unique():
        here = x.group_index == s
        k = math.ceil(round(ratio * int((here & counted).sum()), 9))
        pool = (here & chosen).nonzero().squeeze(-1).tolist()
        pool.sort(key=lambda i: -float(x.entropy[i]))  # stable: flat order on ties
        keep[pool[:k]] = True
    return keep


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ratio", [0.2, 0.5, 1.0])
def test_each_rule_keeps_the_top_of_its_pool(seed: int, ratio: float) -> None:
    x, special = random_inputs(seed)
    trained = x.trained
    assert trained is not None
    everything = torch.ones_like(trained)
    pools = {
        "trained": (trained, trained),
        "content": (trained & ~special, trained & ~special),
        "all": (trained, everything),
    }
    for rule, (chosen, counted) in pools.items():
        y = with_budget(x, rule, special)
        sel = select(y, "entropy", ratio, "group")
        assert torch.equal(sel.selected, expected(x, ratio, chosen, counted)), rule
        assert not sel.selected[~chosen].any() and not sel.ranks[~chosen].any()
        k = sum(
            math.ceil(round(ratio * int(((x.group_index == s) & counted).sum()), 9))
            for s in x.group_index.unique()
        )
        assert selection_budget(y, ratio, "group") == k
    # trained is the rule every selection had before the setting existed
    assert torch.equal(
        select(with_budget(x, "trained", special), "gmts", ratio, "batch").selected,
        select(x, "gmts", ratio, "batch").selected,
    )


def test_an_analysis_leaves_the_chat_templates_special_tokens_out(tiny_lm: Any) -> None:
    """budget_over=content in an analysis: the answers' EOS (a special token of the model's
    tokenizer) is never selected and takes no share of k; trained selects it like any token."""
    lm = tiny_lm("llama")
    tok = lm.tokenizer
    words = [tok(t, add_special_tokens=False)["input_ids"] for t in ("1 2 3", "4 5", "6 7 8 9")]
    ids = [w + [tok.eos_token_id] for w in words]
    group = GroupInput("Q", answer_ids=ids, rewards=[1.0, 0.0, 0.5])
    special = special_mask([t for a in ids for t in a], special_ids(tok))
    assert int(special.sum()) == 3
    for rule in ("trained", "content"):
        config = AnalysisConfig(ratio=1.0, methods=("entropy",), budget_over=rule)
        selected = analyze(lm, [group], config).selections["entropy"].selected
        assert bool(selected[special].any()) == (rule == "trained")
        assert int(selected.sum()) == len(special) - (3 if rule == "content" else 0)


def test_unknown_rules_are_refused_with_the_valid_ones() -> None:
    with pytest.raises(InvalidInputError, match="trained, content, all"):
        AnalysisConfig(budget_over="tokens").validate()
    assert BUDGET_OVER == ("trained", "content", "all")
