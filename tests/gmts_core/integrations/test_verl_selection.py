"""verl's aggregation weights, uid groups and the GMTS selection of padded verl tensors, without
verl (gmts_core.integrations.verl_selection is verl-free; tests/verl covers the plugin itself)."""

from __future__ import annotations

import math

import pytest
import torch

from gmts_core.errors import InvalidInputError
from gmts_core.integrations.verl_selection import (
    VERL_AGG_MODES,
    GMTSSettings,
    LossSettings,
    TokenBatch,
    answer_weights,
    check_aggregation,
    group_ids,
    method_for_loss_mode,
    select_tokens,
)
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.coefficient import ClipSettings


def test_answer_weights_match_the_library_and_verl_agg_loss():
    lengths = torch.tensor([3, 5, 1, 4])
    assert torch.equal(
        answer_weights(lengths, "token-mean", 6), loss_weights(lengths, "token_mean")
    )
    assert torch.equal(
        answer_weights(lengths, "seq-mean-token-mean", 6),
        loss_weights(lengths, "seq_mean_token_mean"),
    )
    # seq-mean-token-sum-norm divides by the padded horizon (verl's default) or loss_scale_factor
    assert torch.equal(
        answer_weights(lengths, "seq-mean-token-sum-norm", 6),
        loss_weights(lengths, "seq_mean_token_sum_norm", max_length=6),
    )
    assert torch.allclose(
        answer_weights(lengths, "seq-mean-token-sum-norm", 6, loss_scale_factor=10.0),
        torch.full((4,), 1 / 40, dtype=torch.float64),
    )
    assert torch.allclose(
        answer_weights(lengths, "seq-mean-token-sum", 6),
        torch.full((4,), 0.25, dtype=torch.float64),
    )
    # token-sum: every token weighs 1 (verl scales each rank's sum by the data-parallel size)
    assert torch.equal(answer_weights(lengths, "token-sum", 6), torch.ones(4, dtype=torch.float64))
    # G is verl's global_batch_size where given (it counts answers without a token too)
    assert torch.allclose(
        answer_weights(torch.tensor([3, 0, 2]), "seq-mean-token-sum", 6, num_answers=3),
        torch.full((3,), 1 / 3, dtype=torch.float64),
    )
    with pytest.raises(InvalidInputError, match="token-sum"):
        answer_weights(lengths, "seq-sum", 6)


def test_aggregations_are_checked_before_the_micro_batches():
    for mode in VERL_AGG_MODES:
        check_aggregation(mode, loss_scale_factor=256)
    check_aggregation("token-sum")
    with pytest.raises(InvalidInputError, match="loss_scale_factor"):
        check_aggregation("seq-mean-token-sum-norm")
    with pytest.raises(InvalidInputError, match="supported: token-mean, token-sum"):
        check_aggregation("seq-sum")


def test_groups_come_from_uids_not_row_blocks():
    assert group_ids(["b", "a", "b", "c", "a"]).tolist() == [0, 1, 0, 2, 1]


def test_settings_are_checked():
    with pytest.raises(InvalidInputError, match="gmts_ratio"):
        GMTSSettings(ratio=0.0)
    with pytest.raises(InvalidInputError, match="gmts_reselect"):
        GMTSSettings(reselect="epoch")
    with pytest.raises(InvalidInputError, match="GMTS modes"):
        method_for_loss_mode("vanilla")


def test_selection_is_per_group_and_in_the_batch_layout():
    gen = torch.Generator().manual_seed(0)
    uids = ["q1", "q0", "q1", "q0", "q1"]  # interleaved rows, unequal groups
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1]])
    adv = torch.tensor([0.5, -1.0, -0.3, 1.0, 0.8]).unsqueeze(1) * mask
    ent = torch.rand(5, 4, generator=gen) * mask
    logp = -torch.rand(5, 4, generator=gen) * mask
    batch = TokenBatch(mask, ent, logp, logp.clone(), adv, uids)
    sel = select_tokens(
        batch, GMTSSettings("gmts_entropy", 0.25, "group"), LossSettings(ClipSettings())
    )
    assert sel.mask[~mask.bool()].sum() == 0
    for rows in ([1, 3], [0, 2, 4]):  # q0, q1
        n = int(mask[rows].sum())
        assert int(sel.mask[rows].sum()) == math.ceil(0.25 * n)
        # the kept tokens are the group's highest |A| w H
        score = (adv.abs() * ent)[rows][mask[rows].bool()]
        kept = (adv.abs() * ent)[rows][sel.mask[rows]]
        assert kept.min() >= score.sort(descending=True).values[math.ceil(0.25 * n) - 1]


def test_content_budget_leaves_special_tokens_out():
    """gmts_budget_over=content: the special tokens (an EOS at the end of each response) are
    never selected and counted in no group's k; an unknown rule is refused."""
    gen = torch.Generator().manual_seed(1)
    uids = ["q0", "q0", "q1", "q1"]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    special = torch.zeros_like(mask, dtype=torch.bool)
    for row, last in enumerate([3, 2, 3, 1]):
        special[row, last] = True
    adv = torch.tensor([0.5, -1.0, 0.7, -0.2]).unsqueeze(1) * mask
    ent = (torch.rand(4, 4, generator=gen) + special * 10.0) * mask  # the EOS would win
    logp = -torch.rand(4, 4, generator=gen) * mask
    batch = TokenBatch(mask, ent, logp, logp.clone(), adv, uids, special=special)
    for rule, counted in (("trained", mask.bool()), ("content", mask.bool() & ~special)):
        settings = GMTSSettings("entropy", 0.5, "group", budget_over=rule)
        sel = select_tokens(batch, settings, LossSettings(ClipSettings()))
        assert bool(sel.mask[special].any()) == (rule == "trained")
        for rows in ([0, 1], [2, 3]):
            assert int(sel.mask[rows].sum()) == math.ceil(0.5 * int(counted[rows].sum()))
    with pytest.raises(InvalidInputError, match="budget_over"):
        GMTSSettings(budget_over="tokens")


# --- gmts_paper_verl under verl's dual clip, against Framework2's update_policy() ------------


def framework2_selected(
    batch: TokenBatch, low: float, high: float, beta: float, percent: float
) -> list[list[bool]]:
    """outongyiLv/GMTS GMTS-Framework2/verl/workers/actor/dp_actor.py update_policy(), GMTS
    branch, in float64 Python: I_trust from the PPO clip only (mask1: r > 1 + high, A > 0;
    mask2: r < 1 - low, A < 0; no clip_ratio_c), score = H |r I A + beta pi_ref/pi - beta|,
    per group the non-zero scores sorted, threshold = the int(n percent)-th smallest, kept
    where score > threshold; groups by uid here (the released code takes blocks of 16 rows)."""
    rows, width = batch.response_mask.shape
    score = [[0.0] * width for _ in range(rows)]
    for b in range(rows):
        for t in range(width):
            if not batch.response_mask[b, t]:
                continue
            r = math.exp(float(batch.log_prob[b, t]) - float(batch.old_log_prob[b, t]))
            a = float(batch.advantages[b, t])
            trust = 0.0 if (r > 1 + high and a > 0) or (r < 1 - low and a < 0) else 1.0
            s = r * a * trust
            if beta and batch.ref_log_prob is not None:
                rho = math.exp(float(batch.ref_log_prob[b, t]) - float(batch.log_prob[b, t]))
                s += beta * rho - beta
            score[b][t] = float(batch.entropy[b, t]) * abs(s)
    kept = [[False] * width for _ in range(rows)]
    for uid in dict.fromkeys(batch.uids):
        members = [b for b in range(rows) if batch.uids[b] == uid]
        nonzero = sorted(score[b][t] for b in members for t in range(width) if score[b][t] != 0)
        num_to_remove = int(len(nonzero) * percent)
        threshold = 0.0 if num_to_remove == 0 else nonzero[num_to_remove - 1]
        for b in members:
            for t in range(width):
                kept[b][t] = bool(batch.response_mask[b, t]) and score[b][t] > threshold
    return kept


def dual_clip_batch(seed: int, with_kl: bool) -> TokenBatch:
    """Four groups of four rows; about a third of the tokens have r > 3 (verl's clip_ratio_c),
    half the answers A < 0."""
    gen = torch.Generator().manual_seed(seed)
    rows, width = 16, 12
    lengths = torch.randint(3, width + 1, (rows,), generator=gen)
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    adv = torch.randn(rows, 1, generator=gen, dtype=torch.float64) * mask
    old = -torch.rand(rows, width, generator=gen, dtype=torch.float64) * 3 * mask
    shift = torch.where(torch.rand(rows, width, generator=gen) < 0.35, 2.5, 0.1)  # log 3 = 1.1
    logp = (old + shift * torch.rand(rows, width, generator=gen)).clamp_max(0) * mask
    ent = torch.rand(rows, width, generator=gen, dtype=torch.float64) * 2 * mask
    ref = (logp - 0.3 * torch.randn(rows, width, generator=gen)) * mask if with_kl else None
    uids = [f"q{(i * 3) % 4}" for i in range(rows)]  # interleaved groups
    return TokenBatch(mask, ent, logp, old, adv, uids, ref_log_prob=ref)


@pytest.mark.parametrize("with_kl", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_gmts_paper_verl_under_the_dual_clip_is_framework2s_rule(seed: int, with_kl: bool) -> None:
    """verl's loss is flat for A < 0 and r > clip_ratio_c, but Framework2's I_trust has no dual
    clip: such a token keeps its score H |r A| and can be selected, as there."""
    batch = dual_clip_batch(seed, with_kl)
    r = (batch.log_prob - batch.old_log_prob).exp()
    dual = batch.response_mask & (r > 3.0) & (batch.advantages < 0)
    assert int(dual.sum()) >= 5  # the edge is in the batch
    beta = 0.01 if with_kl else 0.0
    clip = ClipSettings(0.2, 0.28, beta, delta=3.0)  # verl's clip_ratio_c default
    sel = select_tokens(batch, GMTSSettings("gmts_paper_verl", 0.2, "group"), LossSettings(clip))
    want = torch.tensor(framework2_selected(batch, 0.2, 0.28, beta, 0.8))
    assert torch.equal(sel.mask, want)
    assert bool(sel.mask[dual].any())  # some dual-clipped tokens are trained, as in Framework2
    # the loss's own coefficient (what gmts ranks by) is still flat there
    flat_dual = dual[sel.order][sel.valid[sel.order]]
    assert bool(sel.inputs.clipped[flat_dual].all())


def test_the_issues_token_scores_as_framework2_does() -> None:
    """One token H = 2, A = -0.75, r = 3.5 beside verl's clip_ratio_c = 3: Framework2 scores it
    2 |3.5 * -0.75| = 5.25 (its loss term is flat: verl trains it with gradient 0)."""
    mask = torch.ones(2, 1, dtype=torch.bool)
    old = torch.tensor([[-2.0], [-1.0]], dtype=torch.float64)
    logp = old + torch.tensor([[math.log(3.5)], [0.0]], dtype=torch.float64)
    batch = TokenBatch(
        mask,
        torch.tensor([[2.0], [1.0]], dtype=torch.float64),
        logp,
        old,
        torch.tensor([[-0.75], [0.75]], dtype=torch.float64),
        ["q", "q"],
    )
    sel = select_tokens(
        batch,
        GMTSSettings("gmts_paper_verl", 0.2, "group"),
        LossSettings(ClipSettings(0.2, 0.2, 0.0, delta=3.0)),
    )
    assert sel.selection.scores.tolist() == pytest.approx([5.25, 0.75], rel=1e-12)
