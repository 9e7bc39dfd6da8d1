"""grad_proxy = |A_i| w_i g is the exact norm of the GRPO loss gradient at each token's logits.

The loss L = -sum_i sum_t w_i A_i log pi(y_it) is built naively from logits in float64, with
advantages and weights from their textbook formulas (not from the registries under test), and
autograd gives dL/dz per token. Checked for all three advantage modes x all three aggregation
modes, both on the pure functions and end to end through ``analyze`` on a tiny model.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.testing import assert_close

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.methods.advantages import compute_advantages
from gmts_core.methods.aggregation import loss_weights
from gmts_core.model.loading import LoadedModel
from gmts_core.stats.metrics import grad_proxy, token_stats

ADVANTAGES = ["grpo", "dr_grpo", "rloo"]
AGGREGATIONS = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]


def naive_advantages(r: list[float], mode: str) -> list[float]:
    g, mean = len(r), sum(r) / len(r)
    if mode == "grpo":
        std = (sum((x - mean) ** 2 for x in r) / (g - 1)) ** 0.5
        return [(x - mean) / (std + 1e-4) for x in r]
    if mode == "dr_grpo":
        return [x - mean for x in r]
    return [x - (sum(r) - x) / (g - 1) for x in r]


def naive_weights(lengths: list[int], mode: str) -> list[float]:
    g = len(lengths)
    if mode == "token_mean":
        return [1 / sum(lengths)] * g
    if mode == "seq_mean_token_mean":
        return [1 / (g * n) for n in lengths]
    return [1 / (g * max(lengths))] * g


def autograd_token_norms(
    logits: list[torch.Tensor],
    targets: list[torch.Tensor],
    adv: list[float],
    w: list[float],
    tau: float,
) -> torch.Tensor:
    """||dL/dz_it|| for every token, L = -sum_i sum_t w_i A_i log softmax(z_it / tau)[y_it]."""
    zs = [z.detach().double().requires_grad_(True) for z in logits]
    loss = torch.zeros((), dtype=torch.float64)
    for z, y, a, wi in zip(zs, targets, adv, w, strict=True):
        logp = torch.log_softmax(z / tau, dim=-1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
        loss = loss - wi * a * logp.sum()
    grads = torch.autograd.grad(loss, zs)
    return torch.cat([g.norm(dim=-1) for g in grads])


@pytest.mark.parametrize("adv_mode", ADVANTAGES)
@pytest.mark.parametrize("agg_mode", AGGREGATIONS)
@pytest.mark.parametrize("rewards", [[1.0, 0.0, 0.0, 1.0], [0.5, 2.0, -1.0, 0.0]])
def test_grad_proxy_is_the_loss_gradient_norm(
    adv_mode: str, agg_mode: str, rewards: list[float]
) -> None:
    gen = torch.Generator().manual_seed(0)
    lengths, vocab, tau = [3, 6, 1, 4], 40, 0.8
    logits = [torch.randn(n, vocab, generator=gen, dtype=torch.float64) * 2 for n in lengths]
    targets = [torch.randint(0, vocab, (n,), generator=gen) for n in lengths]
    adv = compute_advantages(torch.tensor(rewards), adv_mode)
    w = loss_weights(torch.tensor(lengths), agg_mode)
    assert_close(adv, torch.tensor(naive_advantages(rewards, adv_mode), dtype=torch.float64))
    assert_close(w, torch.tensor(naive_weights(lengths, agg_mode), dtype=torch.float64))
    g = torch.cat(
        [token_stats(z, y, temperature=tau).grad_norm for z, y in zip(logits, targets, strict=True)]
    )
    per_token = torch.tensor(lengths)
    proxy = grad_proxy(adv.repeat_interleave(per_token), w.repeat_interleave(per_token), g.double())
    want = autograd_token_norms(
        logits, targets, naive_advantages(rewards, adv_mode), naive_weights(lengths, agg_mode), tau
    )
    assert_close(proxy, want, atol=1e-9, rtol=1e-5)


def model_answer_logits(lm: LoadedModel, prompt: str, answers: list[str]) -> tuple[list, list]:
    """Full-vocabulary logits at each answer token, one unpadded forward pass per answer."""
    tok = lm.tokenizer
    p = tok(prompt)["input_ids"]
    logits, targets = [], []
    with torch.no_grad():
        for text in answers:
            a = tok(text, add_special_tokens=False)["input_ids"]
            out = lm.model(torch.tensor([p + a])).logits[0]  # (T, V)
            logits.append(out[len(p) - 1 : len(p) - 1 + len(a)].double())  # position t predicts t+1
            targets.append(torch.tensor(a))
    return logits, targets


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_analyze_grad_proxy_is_the_loss_gradient_norm(
    arch: str, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    """End to end: analyze's per-token grad_proxy, for all 9 mode pairs, against autograd."""
    lm = tiny_lm(arch)
    prompt, answers, rewards, tau = (
        "Q: 47+38=?",
        ["A: 85", "85 carry 1", "84", "Grüße 😀"],
        [1.0, 1.0, 0.0, 0.5],
        1.3,
    )
    logits, targets = model_answer_logits(lm, prompt, answers)
    lengths = [len(t) for t in targets]
    for adv_mode in ADVANTAGES:
        for agg_mode in AGGREGATIONS:
            cfg = AnalysisConfig(
                temperature=tau, advantage=adv_mode, loss_aggregation=agg_mode, top_alternatives=0
            )
            res = analyze(lm, [GroupInput(prompt, answers=answers, rewards=rewards)], cfg)
            got = torch.tensor(
                [t.grad_proxy for a in res.groups[0].answers for t in a.tokens], dtype=torch.float64
            )
            want = autograd_token_norms(
                logits,
                targets,
                naive_advantages(rewards, adv_mode),
                naive_weights(lengths, agg_mode),
                tau,
            )
            assert_close(
                got,
                want,
                atol=1e-8,
                rtol=1e-4,
                msg=lambda m, a=adv_mode, b=agg_mode: f"{a}/{b}: {m}",
            )
