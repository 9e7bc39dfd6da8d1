"""gmts_paper inside TRL's GRPOTrainer: the paper's formula, whatever KL TRL's loss uses.

With ``beta`` > 0 TRL's default ``use_bias_correction_kl=True`` makes its KL term r_t k3_t, whose
derivative is beta r_t log(pi_ref / pi_theta). ``gmts`` ranks by the coefficient of that loss
(tests/gmts_core/integrations/test_trl.py checks it against autograd); ``gmts_paper`` scores with
Framework1's beta (pi_ref / pi_theta - 1) (outongyiLv/GMTS GMTS-Framework1/grpo_tools/grpo.py,
``GMTS()``, method 'grpo'). The expected values are recomputed here in float64 from the batch
TRL built, with ``math`` and lists; real GRPOTrainer batches on a tiny model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from gmts_core.integrations.trl_selection import GROUP_IDS
from tests.gmts_core.integrations.test_trl import make_trainer, model_dir, one_batch, tiny_config

__all__ = ["model_dir"]  # the fixture, shared with test_trl.py

BETA = 0.3  # issue 45: at 0.3 TRL's advantage changed the order in 46 of 100 groups


def off_policy_batch(trainer: Any) -> dict[str, Any]:
    """One batch with ratios pushed to both sides of the clip range and a reference apart."""
    inputs = one_batch(trainer)
    valid = inputs["completion_mask"].bool()
    n = int(valid.sum())
    offsets = torch.zeros_like(inputs["old_per_token_logps"])
    offsets[valid] = torch.linspace(-0.9, 0.9, n)[
        torch.randperm(n, generator=torch.Generator().manual_seed(0))
    ]
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] - offsets
    inputs["ref_per_token_logps"] = inputs["ref_per_token_logps"] + offsets.flip(0)
    return inputs


def framework1_advantages(trainer: Any) -> list[float]:
    """normalize_rewards_per_group of Framework1: per group of num_generations consecutive
    completions, (r - mean) / (np.std(r) + 1e-6), the population std, from the rewards TRL
    computed for this batch (one reward function, weight 1)."""
    rewards = [float(r) for r in trainer._rewards_per_func[:, 0].tolist()]
    size = trainer.num_generations_eval or trainer.num_generations
    out = []
    for start in range(0, len(rewards), size):
        block = rewards[start : start + size]
        mean = sum(block) / len(block)
        std = math.sqrt(sum((r - mean) ** 2 for r in block) / len(block))
        out += [(r - mean) / (std + 1e-6) for r in block]
    return out


def framework1(
    trainer: Any, inputs: dict[str, Any], entropy: list[float], logp: list[float], kl_form: str
) -> tuple[list[float], set[int]]:
    """GMTS() on this batch: per token H |r I A + kl| / (G |o_i|), I from the two clip masks,
    G the completions of the token's group; per group the first max(1, ceil(N * 0.8)) of a
    stable ascending sort removed (selection_ratio 0.2). ``kl_form``: 'paper' beta (rho - 1),
    'bias_corrected' beta r log rho (what TRL's loss differentiates to)."""
    valid = inputs["completion_mask"].bool()
    rows = valid.nonzero()[:, 0].tolist()
    old = inputs["old_per_token_logps"][valid].double().tolist()
    ref = inputs["ref_per_token_logps"][valid].double().tolist()
    adv = framework1_advantages(trainer)
    group = inputs[GROUP_IDS].tolist()
    length = valid.sum(1).tolist()
    size = {g: group.count(g) for g in group}
    scores = []
    for t, b in enumerate(rows):
        r = math.exp(logp[t] - old[t])
        a = adv[b]
        flat = (r > 1 + trainer.epsilon_high and a > 0) or (r < 1 - trainer.epsilon_low and a < 0)
        log_rho = ref[t] - logp[t]
        kl = BETA * (math.exp(log_rho) - 1) if kl_form == "paper" else BETA * r * log_rho
        score = entropy[t] * abs(r * (0.0 if flat else 1.0) * a + kl)
        scores.append(score / (size[group[b]] * length[b]))
    kept: set[int] = set()
    for g in set(group):
        entries = sorted(
            ((scores[t], t) for t, b in enumerate(rows) if group[b] == g), key=lambda e: e[0]
        )
        k = max(1, math.ceil(len(entries) * 0.8))
        kept |= {t for _, t in entries[k:]}
    return scores, kept


@pytest.mark.parametrize("bias_corrected_kl", [True, False])
def test_gmts_paper_scores_with_the_papers_kl_and_gmts_with_trls(
    model_dir: Path, tmp_path: Path, bias_corrected_kl: bool
) -> None:
    config = tiny_config(
        tmp_path,
        loss_type="grpo",
        num_iterations=2,
        beta=BETA,
        use_bias_correction_kl=bias_corrected_kl,
    )
    trainer = make_trainer(
        model_dir, tmp_path, config=config, token_selection="gmts_paper", selection_ratio=0.2
    )
    inputs = off_policy_batch(trainer)
    valid = inputs["completion_mask"].bool()
    trainer.model.eval()
    trainer.compute_loss(trainer.model, inputs)
    applied = trainer.last_selection
    x = applied.inputs
    entropy, logp = x.entropy.tolist(), x.logprob.tolist()
    scores, kept = framework1(trainer, inputs, entropy, logp, "paper")
    assert_close(applied.selection.scores, torch.tensor(scores, dtype=torch.float64))
    got = applied.local_mask[valid]
    assert {t for t in range(len(scores)) if bool(got[t])} == kept
    # the choice matters on this batch: TRL's bias-corrected KL derivative scores otherwise
    other, _ = framework1(trainer, inputs, entropy, logp, "bias_corrected")
    assert not torch.allclose(torch.tensor(other), torch.tensor(scores))
    # and so does the advantage: TRL's (sample std + 1e-4) is not Framework1's
    assert not torch.allclose(
        inputs["advantages"].double(),
        torch.tensor(framework1_advantages(trainer), dtype=torch.float64),
    )
    # gmts: the coefficient of the loss TRL optimises
    trainer.token_selection = "gmts"
    trainer.compute_loss(trainer.model, inputs)
    kl = trainer.last_selection.inputs.kl_coef
    assert kl is not None
    r = torch.exp(x.logprob - inputs["old_per_token_logps"][valid].double())
    log_rho = inputs["ref_per_token_logps"][valid].double() - x.logprob
    expected_kl = BETA * r * log_rho if bias_corrected_kl else BETA * torch.expm1(log_rho)
    assert_close(kl, expected_kl, rtol=1e-5, atol=1e-9)


def test_completions_without_loss_tokens_count_in_g(model_dir: Path, tmp_path: Path) -> None:
    """A completion whose mask is all zero (as ``mask_truncated_completions`` leaves a truncated
    one) still counts in its group's G, as Framework1 counts a zero-length answer:
    score = H |A_i| / (G |o_i|) with G = num_generations."""
    trainer = make_trainer(model_dir, tmp_path, token_selection="gmts_paper", selection_ratio=0.2)
    inputs = one_batch(trainer)
    inputs["completion_mask"][0] = 0
    valid = inputs["completion_mask"].bool()
    trainer.model.eval()
    trainer.compute_loss(trainer.model, inputs)
    x = trainer.last_selection.inputs
    assert x.answer_group is not None and x.answer_group.numel() == valid.shape[0]
    rows = valid.nonzero()[:, 0].tolist()
    group = inputs[GROUP_IDS].tolist()
    size = {g: group.count(g) for g in group}
    assert size[group[0]] == trainer.num_generations
    adv, length = framework1_advantages(trainer), valid.sum(1).tolist()
    expected = [
        h * abs(adv[b]) / (size[group[b]] * length[b])
        for h, b in zip(x.entropy.tolist(), rows, strict=True)
    ]
    assert_close(
        trainer.last_selection.selection.scores, torch.tensor(expected, dtype=torch.float64)
    )
