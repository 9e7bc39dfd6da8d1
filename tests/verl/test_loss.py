"""The registered GMTS losses through verl's own ppo_loss / agg_loss equal the library's loss
and selection on the same numbers, for every aggregation verl has."""

from __future__ import annotations

import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.utils.losses import ppo_loss

import gmts_core.integrations.verl  # noqa: F401  (registers the GMTS losses, installs the hook)
from gmts_core.grpo.loss import grpo_loss
from gmts_core.integrations import verl_compat as compat
from gmts_core.integrations import verl_selection
from gmts_core.integrations.verl_selection import (
    LOSS_MODES,
    VERL_AGG_MODES,
    TokenBatch,
    select_tokens,
)
from gmts_core.methods.aggregation import loss_weights
from gmts_core.methods.coefficient import ClipSettings, effective_coefficient, selection_inputs
from gmts_core.methods.selection import list_methods, select
from tests.verl.batches import (
    SCALE,
    VOCAB,
    actor_config,
    agg_settings,
    full_sequence,
    make_rows,
    to_tensordict,
)

AGG_MODES = VERL_AGG_MODES  # all five of verl 0.9.1 (test_every_verl_aggregation_is_known)
GROUPS = [3, 5, 2, 7]  # unequal group sizes
BETA = 0.05


def _methods() -> list:
    return [
        pytest.param(
            m,
            marks=pytest.mark.skipif(
                LOSS_MODES[m] not in list_methods(), reason=f"{m} not in gmts_core yet"
            ),
        )
        for m in LOSS_MODES
    ]


def test_every_gmts_mode_resolves():
    for mode in LOSS_MODES:
        assert get_policy_loss_fn(mode).__name__ == f"compute_policy_loss_{mode}"


def test_policy_loss_config_carries_the_settings():
    config = actor_config(loss_mode="gmts_paper", gmts_ratio=0.3, gmts_scope="answer")
    settings = verl_selection.gmts_settings(config.policy_loss)
    assert (settings.method, settings.ratio, settings.scope) == ("gmts_paper", 0.3, "answer")
    assert settings.reselect == "mini_batch"


def _sum_pi_squared(rows) -> torch.Tensor:
    """A valid sum_v pi_v^2 for each token: p^2 + u (1 - p)^2, u in (0, 1)."""
    p = rows.log_prob.exp()
    u = torch.rand(p.shape, generator=torch.Generator().manual_seed(5))
    return (p.square() + u * (1 - p).square()) * rows.response_mask


def _library_weights(lengths: torch.Tensor, agg: str) -> torch.Tensor:
    """w_i of verl's agg_loss, from the library where it has the mode."""
    if agg == "seq-mean-token-sum":
        return torch.full_like(lengths, 1.0 / len(lengths), dtype=torch.float64)
    if agg == "token-sum":
        return torch.ones_like(lengths, dtype=torch.float64)
    lib = {
        "token-mean": "token_mean",
        "seq-mean-token-mean": "seq_mean_token_mean",
        "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
    }[agg]
    return loss_weights(lengths, lib, max_length=SCALE)


def _library(rows, method: str, agg: str, ratio: float):
    """The library's selection and loss, flat in plain batch-row order (no grouping)."""
    valid = rows.response_mask.bool()
    lengths = valid.sum(-1)
    w = _library_weights(lengths, agg)
    row = torch.arange(len(lengths)).unsqueeze(1).expand_as(valid)[valid]
    ids = {u: i for i, u in enumerate(dict.fromkeys(rows.uids))}
    group = torch.tensor([ids[u] for u in rows.uids])[row]
    logp, old, ref = rows.log_prob[valid], rows.old_log_prob[valid], rows.ref_log_prob[valid]
    adv = rows.advantages[valid]
    coef = effective_coefficient(adv, w[row], ClipSettings(0.2, 0.28, BETA, 3.0), logp, old, ref)
    lp = logp.double()
    g = (1 - 2 * lp.exp() + _sum_pi_squared(rows)[valid].double()).sqrt()
    x = selection_inputs(rows.entropy[valid], logp, g, w[row], row, group, coef, advantage=adv)
    sel = select(x, LOSS_MODES[method], ratio, "group")
    loss = grpo_loss(
        logp.double(), old.double(), adv, w[row], sel.selected, 0.2, 0.28, ref.double(), BETA
    )
    return sel, loss


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("method", _methods())
def test_ppo_loss_equals_library(method: str, agg: str):
    rows = make_rows(GROUPS)
    config = actor_config(
        loss_mode=method,
        **agg_settings(agg),
        use_kl_loss=True,
        kl_loss_coef=BETA,
        kl_loss_type="low_var_kl",
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        gmts_ratio=0.25,
    )
    batch = TokenBatch(
        rows.response_mask,
        rows.entropy,
        rows.log_prob,
        rows.old_log_prob,
        rows.advantages,
        rows.uids,
        rows.ref_log_prob,
        _sum_pi_squared(rows),
    )
    ours = select_tokens(
        batch,
        verl_selection.gmts_settings(config.policy_loss),
        verl_selection.loss_settings(config, 1.0, VOCAB),
    )
    compat.STATE.selections = 1  # the hook's part, done above by hand
    td = to_tensordict(rows, advantages=rows.advantages * ours.mask)
    loss, _ = ppo_loss(config, {"log_probs": full_sequence(rows.log_prob, rows)}, td)

    lib_sel, lib_loss = _library(rows, method, agg, 0.25)
    valid = rows.response_mask.bool()
    assert torch.equal(ours.mask[valid], lib_sel.selected)
    assert ours.mask[~valid].sum() == 0
    torch.testing.assert_close(loss.double(), lib_loss.loss.double(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_gradient_equals_library(agg: str):
    """d loss / d log pi of the registered loss (verl's agg_loss) equals the library's."""
    rows = make_rows(GROUPS, seed=3)
    config = actor_config(
        loss_mode="gmts_entropy", **agg_settings(agg), clip_ratio_low=0.2, clip_ratio_high=0.28
    )
    batch = TokenBatch(
        rows.response_mask,
        rows.entropy,
        rows.log_prob,
        rows.old_log_prob,
        rows.advantages,
        rows.uids,
    )
    ours = select_tokens(
        batch,
        verl_selection.gmts_settings(config.policy_loss),
        verl_selection.loss_settings(config, 1.0, VOCAB),
    )
    compat.STATE.selections, compat.STATE.last = 1, ours
    config.global_batch_info["loss_scale_factor"] = config.loss_scale_factor  # as ppo_loss does
    logp = rows.log_prob.clone().requires_grad_()
    loss, metrics = get_policy_loss_fn("gmts_entropy")(
        rows.old_log_prob, logp, rows.advantages * ours.mask, rows.response_mask.bool(), agg, config
    )
    loss.backward()
    valid = rows.response_mask.bool()
    lengths = valid.sum(-1)
    row = torch.arange(len(lengths)).unsqueeze(1).expand_as(valid)[valid]
    w = _library_weights(lengths, agg)[row]
    flat = rows.log_prob[valid].double().requires_grad_()
    lib = grpo_loss(
        flat,
        rows.old_log_prob[valid].double(),
        rows.advantages[valid],
        w,
        ours.mask[valid],
        0.2,
        0.28,
    )
    lib.loss.backward()
    torch.testing.assert_close(logp.grad[valid].double(), flat.grad, rtol=1e-5, atol=1e-8)
    assert 0 < metrics["actor/gmts_selected_fraction"] < 1


def test_loss_refuses_to_run_without_the_hook():
    rows = make_rows([2])
    config = actor_config(loss_mode="gmts_paper")
    with pytest.raises(RuntimeError, match="no GMTS selection ran"):
        get_policy_loss_fn("gmts_paper")(
            rows.old_log_prob,
            rows.log_prob,
            rows.advantages,
            rows.response_mask.bool(),
            "token-mean",
            config,
        )
