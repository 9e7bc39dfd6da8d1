"""The effective coefficient omega_t against autograd of the full loss, per token.

The full loss (policy term with PPO clipping on both sides, k3 KL term) is differentiated by
autograd with respect to each token's logits and log-prob; gamma = w |omega| g must be the
norm of the first, -w omega the second, and ``clipped`` exactly where the policy term's
gradient vanishes. On-policy, off-policy with ratios far from 1 on both clip sides, and with
beta > 0; for the pure function, the live RL step's re-selection and a session's analysis.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.testing import assert_close

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.config import RLConfig
from gmts_core.grpo.loss import grpo_loss
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.grpo.records import TrainBatch
from gmts_core.grpo.selection import current_selection
from gmts_core.grpo.update import make_optimizer, policy_update
from gmts_core.methods.coefficient import ClipSettings, effective_coefficient
from gmts_core.methods.selection import rank_and_select, scope_ids_for
from gmts_core.model.loading import LoadedModel
from gmts_core.stats.metrics import token_stats

EPS_LOW, EPS_HIGH = 0.2, 0.28


def full_loss_gradients(
    logits: torch.Tensor,
    targets: torch.Tensor,
    old: torch.Tensor,
    ref: torch.Tensor | None,
    adv: torch.Tensor,
    w: torch.Tensor,
    beta: float,
    tau: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per token: ||dL/dz||, dL/dlogp, and d(policy term)/dlogp, by autograd in float64."""
    z = logits.detach().double().requires_grad_(True)  # (N, V)
    logp = torch.log_softmax(z / tau, -1).gather(-1, targets[:, None]).squeeze(-1)
    mask = torch.ones_like(adv, dtype=torch.bool)
    terms = grpo_loss(logp, old, adv, w, mask, EPS_LOW, EPS_HIGH, ref, beta)
    (dz,) = torch.autograd.grad(terms.loss, z, retain_graph=True)
    (dlogp,) = torch.autograd.grad(terms.loss, logp, retain_graph=True)
    policy_only = grpo_loss(logp, old, adv, w, mask, EPS_LOW, EPS_HIGH).loss
    (dpolicy,) = torch.autograd.grad(policy_only, logp)
    return dz.norm(dim=-1), dlogp, dpolicy


def case(seed: int, off_policy: bool, beta: float) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    n, v = 48, 40
    logits = torch.randn(n, v, generator=gen, dtype=torch.float64) * 2.5
    targets = torch.randint(0, v, (n,), generator=gen)
    logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)
    adv = torch.tensor([1.3, -0.7, 0.4, -1.1, 0.0, 0.9], dtype=torch.float64).repeat_interleave(8)
    w = torch.linspace(0.01, 0.05, 6, dtype=torch.float64).repeat_interleave(8)
    # log-ratio offsets from -0.9 to 0.9: both clip sides, for both advantage signs
    offsets = torch.linspace(-0.9, 0.9, n, dtype=torch.float64)[torch.randperm(n, generator=gen)]
    old = logp - offsets if off_policy else logp.clone()
    ref = logp + torch.randn(n, generator=gen, dtype=torch.float64) * 0.5
    return {
        "logits": logits,
        "targets": targets,
        "logp": logp,
        "old": old,
        "ref": ref,
        "adv": adv,
        "w": w,
        "beta": torch.tensor(beta),
    }


@pytest.mark.parametrize(
    ("off_policy", "beta"), [(False, 0.0), (True, 0.0), (False, 0.3), (True, 0.3)]
)
def test_coefficient_equals_autograd_of_full_loss(off_policy: bool, beta: float) -> None:
    c = case(0, off_policy, beta)
    norm, dlogp, dpolicy = full_loss_gradients(
        c["logits"], c["targets"], c["old"], c["ref"], c["adv"], c["w"], beta
    )
    eff = effective_coefficient(
        c["adv"], c["w"], ClipSettings(EPS_LOW, EPS_HIGH, beta), c["logp"], c["old"], c["ref"]
    )
    g = token_stats(c["logits"], c["targets"]).grad_norm.double()
    assert_close(c["w"] * eff.coef.abs() * g, norm, rtol=1e-5, atol=1e-12)
    assert_close(-c["w"] * eff.coef, dlogp, rtol=1e-9, atol=1e-14)
    signal = c["adv"] != 0
    assert torch.equal(eff.clipped[signal], (dpolicy == 0)[signal])
    assert_close(eff.ratio, torch.exp(c["logp"] - c["old"]))
    if off_policy:  # the case really is off-policy on both sides
        assert bool((eff.clipped & (c["adv"] > 0)).any()) and bool(
            (eff.clipped & (c["adv"] < 0)).any()
        )
    else:
        assert not eff.clipped.any()
    if not off_policy and beta == 0.0:  # today's gamma
        assert_close(eff.coef, c["adv"])


@pytest.fixture()
def policy(tiny_lm: Callable[[str], LoadedModel]) -> TrainablePolicy:
    """A full-copy policy of the tiny Llama, moved away from its start."""
    pol = TrainablePolicy(tiny_lm("llama"))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in pol.trainable_parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return pol


def _batch(pol: TrainablePolicy) -> TrainBatch:
    tok = pol.tokenizer
    prompt = list(tok("Q: 47+38=?", add_special_tokens=False)["input_ids"])
    answers = [
        list(tok(a, add_special_tokens=False)["input_ids"])
        for a in (" 85 carry", " 84", " 7+8=15 so 85", " 95")
    ]
    adv = [1.2, -0.8, 0.6, -1.0]
    n = sum(len(a) for a in answers)
    return TrainBatch(
        sequences=[(prompt, a) for a in answers],
        advantages=torch.tensor(
            [x for x, a in zip(adv, answers, strict=True) for _ in a], dtype=torch.float64
        ),
        weights=torch.full((n,), 1.0 / n, dtype=torch.float64),
        mask=torch.ones(n, dtype=torch.bool),
        answer_index=torch.tensor([i for i, a in enumerate(answers) for _ in a]),
        group_index=torch.zeros(n, dtype=torch.long),
    )


def _own_logits(model: torch.nn.Module, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N, V) from the model's own forward, and the targets (N,)."""
    rows, targets = [], []
    with torch.no_grad():
        for prompt, answer in batch.sequences:
            out = model(input_ids=torch.tensor([prompt + answer]), use_cache=False).logits[0]
            rows.append(out[len(prompt) - 1 : len(prompt) - 1 + len(answer)])
            targets += answer
    return torch.cat(rows).double(), torch.tensor(targets)


@pytest.mark.parametrize("beta", [0.0, 0.4])
def test_live_step_reselection_scores_equal_autograd(policy: TrainablePolicy, beta: float) -> None:
    batch = _batch(policy)
    logits, targets = _own_logits(policy.model, batch)
    logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)
    n = logp.numel()
    old = logp - torch.linspace(-0.8, 0.8, n, dtype=torch.float64).flip(0)  # both clip sides
    base_logits, _ = _own_logits(policy.base.model, batch)  # the reference: the start
    ref = torch.log_softmax(base_logits, -1).gather(-1, targets[:, None]).squeeze(-1)
    config = RLConfig(
        method="gmts", ratio=0.3, beta=beta, epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH
    )
    x, sel = current_selection(policy, batch, old, ref, config)
    norm, dlogp, dpolicy = full_loss_gradients(
        logits, targets, old, ref, batch.advantages, batch.weights, beta
    )
    assert_close(x.grad_proxy, norm, rtol=1e-4, atol=1e-9)
    assert x.coef is not None and x.clipped is not None
    assert_close(-batch.weights * x.coef, dlogp, rtol=1e-4, atol=1e-9)
    assert torch.equal(x.clipped, dpolicy == 0)
    assert bool(x.clipped.any()) and not bool(x.clipped.all())
    # the selection is the top k of the true per-token gradient norms
    _, want = rank_and_select(norm, scope_ids_for(x, "batch"), 0.3)
    assert torch.equal(sel.selected, want)


def test_policy_update_records_each_updates_coefficient(policy: TrainablePolicy) -> None:
    """Inner updates record omega_t: at the first r = 1 and omega = A + beta (rho_ref - 1);
    with ``reselect`` the later updates train on a fresh selection."""
    pol = policy
    batch = _batch(pol)
    batch.mask = torch.zeros_like(batch.mask)
    batch.mask[:3] = True
    config = RLConfig(
        method="gmts",
        ratio=0.3,
        beta=0.2,
        inner_steps=3,
        reselect=True,
        optimizer="sgd",
        learning_rate=0.5,
        measure_kl=True,
    )
    update = policy_update(pol, make_optimizer(pol, config), batch, config)
    first = update.coefficients[0]
    assert_close(first.ratio, torch.ones_like(first.ratio))
    assert torch.equal(update.masks[0], batch.mask)
    assert len(update.masks) == 3
    assert all(
        int(m.sum()) == int(torch.ceil(torch.tensor(0.3 * batch.num_tokens)))
        for m in update.masks[1:]
    )
    assert any(not torch.equal(m, batch.mask) for m in update.masks[1:])
    assert not torch.allclose(
        update.coefficients[2].ratio, torch.ones(batch.num_tokens, dtype=torch.float64)
    )


def test_session_analysis_coefficient_has_the_kl_to_the_start(policy: TrainablePolicy) -> None:
    """Analysis of a session's policy: r = 1, omega = A + beta (pi_ref / pi - 1) with the
    reference the session's start; gamma equals autograd of the full loss."""
    beta = 0.5
    lm = policy.as_loaded("session policy", beta=beta)
    group = GroupInput("Q: 47+38=?", answers=[" 85", " 84 so", " 7+8=15"], rewards=[1.0, 0.0, 0.5])
    result = analyze(
        lm, [group], AnalysisConfig(methods=("gmts", "gmts_paper"), top_alternatives=0)
    )
    tokens = [t for a in result.groups[0].answers for t in a.tokens]
    batch = TrainBatch(
        sequences=[],
        advantages=torch.empty(0),
        weights=torch.empty(0),
        mask=torch.empty(0),
        answer_index=torch.empty(0),
    )
    from gmts_core.stats.tokenization import encode_prompt

    prompt = encode_prompt(lm.tokenizer, group.prompt, False)
    batch.sequences = [(prompt, [t.id for t in a.tokens]) for a in result.groups[0].answers]
    logits, targets = _own_logits(policy.model, batch)
    base_logits, _ = _own_logits(policy.base.model, batch)
    logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)
    ref = torch.log_softmax(base_logits, -1).gather(-1, targets[:, None]).squeeze(-1)
    adv = torch.tensor(
        [a.advantage for a in result.groups[0].answers for _ in a.tokens], dtype=torch.float64
    )
    w = torch.tensor(
        [a.weight for a in result.groups[0].answers for _ in a.tokens], dtype=torch.float64
    )
    norm, dlogp, _ = full_loss_gradients(logits, targets, logp, ref, adv, w, beta)
    assert_close(
        torch.tensor([t.grad_proxy for t in tokens], dtype=torch.float64),
        norm,
        rtol=1e-4,
        atol=1e-9,
    )
    assert_close(
        torch.tensor([t.coef for t in tokens], dtype=torch.float64),
        -dlogp / w,
        rtol=1e-4,
        atol=1e-7,
    )
    assert all(t.ratio == 1.0 and not t.clipped for t in tokens)
    # the paper's Framework1 score: H |A + beta rho - beta| / (G |o_i|), A with the
    # population std of the rewards (eps 1e-6), KL part scaled like the advantage
    rewards = [a.reward for a in result.groups[0].answers]
    mean = sum(rewards) / len(rewards)
    pstd = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    answers = result.groups[0].answers
    pop = [(a.reward - mean) / (pstd + 1e-6) for a in answers for _ in a.tokens]
    lengths = [len(a.tokens) for a in answers for _ in a.tokens]
    paper = [
        t.entropy * abs(a + beta * (r - 1.0)) / (len(answers) * n)
        for t, a, n, r in zip(tokens, pop, lengths, torch.exp(ref - logp).tolist(), strict=True)
    ]
    assert_close(
        torch.tensor([t.scores["gmts_paper"] for t in tokens]),
        torch.tensor(paper),
        rtol=1e-4,
        atol=1e-9,
    )


def test_gmts_paper_verl_reselects_on_every_update(policy: TrainablePolicy) -> None:
    """Framework2 re-selects on every PPO mini-batch: gmts_paper_verl re-selects before every
    inner update after the first even without ``reselect``, by its own rule at the current
    policy (kept strictly above the threshold of non-zero scores); gmts_paper keeps the
    selection of the step, as Framework1 selects once per step."""
    from gmts_core.grpo.selection import current_selection

    batch = _batch(policy)
    batch.rewards = torch.tensor(
        [r for r, (_, a) in zip([1.0, 0.0, 0.5, 0.0], batch.sequences, strict=True) for _ in a],
        dtype=torch.float64,
    )
    for method, reselected in (("gmts_paper_verl", True), ("gmts_paper", False)):
        config = RLConfig(
            method=method, ratio=0.3, inner_steps=3, optimizer="sgd", learning_rate=0.5
        )
        assert config.reselect is False
        pol = TrainablePolicy(policy.base)
        update = policy_update(pol, make_optimizer(pol, config), batch, config)
        later_differ = any(not torch.equal(m, batch.mask) for m in update.masks[1:])
        assert later_differ == reselected, method
    # the mask after the first update is the method's own rule at that policy
    config = RLConfig(method="gmts_paper_verl", ratio=0.3, inner_steps=1, optimizer="sgd")
    pol = TrainablePolicy(policy.base)
    old = policy_update(pol, make_optimizer(pol, config), batch, config).logprob_before
    x, sel = current_selection(pol, batch, old, None, config)
    nonzero = sorted(float(s) for s in sel.scores if s != 0)
    k = int(len(nonzero) * 0.7)
    threshold = 0.0 if k == 0 else nonzero[k - 1]
    assert sel.selected.tolist() == [float(s) > threshold for s in sel.scores]
    assert x.reward is not None
