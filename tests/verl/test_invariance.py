"""Micro-batch invariance: one PPO mini-batch through verl's own TrainingWorker.train_mini_batch
with the GMTS hook, split into 1, 2 or 4 micro-batches or by verl's dynamic batch sizes, trains
the same selection with the same gradient -- the gradient of the loss written here from scratch
in float64 (verl's clipped loss with its dual clip over the selected tokens, the k3 KL over all
tokens, each answer weighted as verl's agg_loss weighs it) -- for every GMTS loss mode, every
aggregation verl 0.9.1 has, and both layouts verl's trainers hand the actor (jagged response
fields: the default v1 trainer, here with a KL weight of 0.05; padded: trainer.use_v1=false,
here without KL).
seq-mean-token-sum-norm without loss_scale_factor is refused when the actor config is built:
verl's own loss depends on the micro-batching there (shown below)."""

from __future__ import annotations

import pytest
import torch
from verl.utils import tensordict_utils as tu

import gmts_core.integrations.verl  # noqa: F401  (registers the GMTS losses, installs the hook)
from gmts_core.errors import InvalidInputError
from gmts_core.integrations import verl_compat as compat
from gmts_core.integrations import verl_selection
from gmts_core.integrations.verl_selection import LOSS_MODES, VERL_AGG_MODES, select_tokens
from tests.verl.batches import (
    LAYOUTS,
    SCALE,
    VOCAB,
    Rows,
    actor_config,
    agg_settings,
    make_rows,
    to_tensordict,
)
from tests.verl.engine import TokenModel, row_token_batch, training_worker

GROUPS = [3, 5, 2, 6]  # 16 rows: 1, 2 or 4 micro-batches of equal size
SPLITS = ("1", "2", "4", "dynamic")
LOW, HIGH, DUAL = 0.2, 0.28, 3.0


def _weights(lengths: torch.Tensor, agg: str, rows: int) -> torch.Tensor:
    """w_i of verl 0.9.1's agg_loss over a whole mini-batch of ``rows`` answers, (B,)."""
    n = lengths.double()
    return {
        "token-mean": lambda: torch.full_like(n, 1.0 / float(n.sum())),
        "token-sum": lambda: torch.ones_like(n),
        "seq-mean-token-mean": lambda: 1.0 / (rows * n),
        "seq-mean-token-sum": lambda: torch.full_like(n, 1.0 / rows),
        "seq-mean-token-sum-norm": lambda: torch.full_like(n, 1.0 / (rows * SCALE)),
    }[agg]()


def reference_gradient(
    model: TokenModel, rows: Rows, mask: torch.Tensor, agg: str, beta: float
) -> torch.Tensor:
    """d loss / d table of the from-scratch loss (module docstring), float64."""
    table = model.table.detach().double().clone().requires_grad_()
    lengths = rows.response_mask.sum(-1)
    w = _weights(lengths, agg, len(lengths))
    p = rows.prompts.shape[1]
    loss = table.new_zeros(())
    for i, n in enumerate(lengths.tolist()):
        seq = torch.cat([rows.prompts[i], rows.responses[i, :n]])
        logp = torch.log_softmax(table[seq[p - 1 : p - 1 + n]], -1)
        logp = logp.gather(-1, seq[p : p + n, None])[:, 0]
        adv = rows.advantages[i, :n].double()
        ratio = torch.exp(logp - rows.old_log_prob[i, :n].double())
        pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - LOW, 1 + HIGH))
        pg = torch.where(adv < 0, torch.minimum(pg, -adv * DUAL), pg)
        loss = loss + w[i] * (pg * mask[i, :n]).sum()
        if beta:
            d = rows.ref_log_prob[i, :n].double() - logp
            loss = loss + beta * w[i] * (d.exp() - d - 1).clamp(-10, 10).sum()
    loss.backward()
    assert table.grad is not None
    return table.grad


def train_one_mini_batch(config, rows: Rows, split: str, layout: str = "padded"):
    """verl's train_mini_batch on ``rows`` as one mini-batch (as the trainer sends it)."""
    b = len(rows.uids)
    dynamic = split == "dynamic"
    worker = training_worker(
        config,
        use_dynamic_bsz=dynamic,
        micro_batch_size=2 if dynamic else b // int(split),
        max_token_len=24,
    )
    td = to_tensordict(rows, layout=layout)
    tu.assign_non_tensor(
        td,
        mini_batch_size=b,
        global_batch_size=b,
        epochs=1,
        seed=0,
        dataloader_kwargs={"shuffle": False},
        calculate_entropy=False,
        temperature=1.0,
    )
    output = worker.train_mini_batch(td)
    return worker, output


def _config(method: str, agg: str, beta: float, **extra):
    kl = dict(use_kl_loss=True, kl_loss_coef=beta, kl_loss_type="low_var_kl") if beta else {}
    return actor_config(
        loss_mode=method,
        **agg_settings(agg),
        clip_ratio_low=LOW,
        clip_ratio_high=HIGH,
        clip_ratio_c=DUAL,
        gmts_ratio=0.25,
        **kl,
        **extra,
    )


@pytest.mark.parametrize(("layout", "beta"), [("jagged", 0.05), ("padded", 0.0)])
@pytest.mark.parametrize("agg", VERL_AGG_MODES)
@pytest.mark.parametrize("method", list(LOSS_MODES))
def test_micro_batches_train_the_same_selection_and_gradient(
    process_group, method: str, agg: str, layout: str, beta: float
):
    rows = make_rows(GROUPS, max_len=7, seed=8)
    b = len(rows.uids)
    config = _config(method, agg, beta)  # the micro-batching is the worker's (engine config)
    masks, grads = [], []
    for split in SPLITS:
        worker, _ = train_one_mini_batch(config, rows, split, layout)
        engine = worker.engine
        n_micro = engine.micro_batches[0]
        assert n_micro > 1 if split == "dynamic" else n_micro == int(split)
        policy = engine.snapshots[0]  # the policy the mini-batch started from
        expected = select_tokens(
            row_token_batch(policy, rows, with_ref=bool(beta), num_answers=b),
            verl_selection.gmts_settings(config.policy_loss),
            verl_selection.loss_settings(config, 1.0, VOCAB),
        )
        assert compat.STATE.last is not None
        mask = compat.STATE.last.mask
        assert torch.equal(mask, expected.mask), split
        assert 0 < int(mask.sum()) < int(rows.response_mask.sum())
        reference = reference_gradient(policy, rows, mask.double(), agg, beta)
        torch.testing.assert_close(engine.grads[0].double(), reference, rtol=1e-4, atol=1e-7)
        masks.append(mask)
        grads.append(engine.grads[0])
    for split, mask, grad in zip(SPLITS[1:], masks[1:], grads[1:], strict=True):
        assert torch.equal(mask, masks[0]), split
        torch.testing.assert_close(grad, grads[0], rtol=1e-4, atol=1e-7)


def test_every_verl_aggregation_is_known():
    """The five modes of verl's actor.yaml (and its ActorConfig) are the five GMTS weighs."""
    import re
    from pathlib import Path

    import verl

    text = (Path(verl.__path__[0]) / "trainer" / "config" / "actor" / "actor.yaml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("# Loss aggregation mode:"))
    assert tuple(re.findall(r'"([a-z-]+)"', line)) == VERL_AGG_MODES


@pytest.mark.parametrize("method", list(LOSS_MODES))
def test_sum_norm_without_scale_factor_is_refused_at_config_time(method: str):
    with pytest.raises(Exception, match="loss_scale_factor") as raised:
        actor_config(loss_mode=method, loss_agg_mode="seq-mean-token-sum-norm")
    causes = [raised.value]
    while causes[-1].__cause__ is not None:  # Hydra wraps what the config class raised
        causes.append(causes[-1].__cause__)
    assert any(isinstance(c, InvalidInputError) for c in causes)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_verl_own_sum_norm_without_scale_factor(process_group, layout: str):
    """Why the refusal: without loss_scale_factor verl 0.9.1 divides by the padded response
    width of the tensors its loss sees. The legacy trainer pads every row to the batch's width
    (invariant); the default v1 trainer's rows are jagged, padded per micro-batch, so its own
    (non-GMTS) loss trains another gradient with 4 micro-batches than with 1."""
    rows = make_rows(GROUPS, max_len=7, seed=8)
    grads = []
    for split in ("1", "4"):
        config = actor_config(loss_mode="vanilla", loss_agg_mode="seq-mean-token-sum-norm")
        worker, _ = train_one_mini_batch(config, rows, split, layout)
        assert compat.STATE.selections == 0  # not a GMTS mode: the hook stays out
        grads.append(worker.engine.grads[0])
    same = torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-8)
    assert same == (layout == "padded")
