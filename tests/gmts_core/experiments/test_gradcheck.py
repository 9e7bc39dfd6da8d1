"""Exact per-token gradients against independent single-token backward passes, and the
fidelity report against hand computations."""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput
from gmts_core.errors import InvalidInputError, LimitExceededError
from gmts_core.experiments.gradcheck import FlatSelections, fidelity_report, gradcheck
from gmts_core.experiments.token_gradients import TokenGradients, exact_token_gradients
from gmts_core.model.loading import LoadedModel, load_model
from tests.arch_matrix import build_tiny
from tests.tiny_models import save_tiny_model

SEQS = [([1, 5, 9], [7, 3, 12, 4]), ([2, 8], [6, 6, 11]), ([4], [10, 2])]
COEFS = [0.3, -0.7, 0.0]  # w_i A_i; the last answer carries no signal
TEMPERATURE = 0.8
N = sum(len(a) for _, a in SEQS)
MASK = torch.tensor([True, False, True, False, False, True, True, False, True])


def tiny_llama(tied: bool) -> LlamaForCausalLM:
    torch.manual_seed(1)
    cfg = LlamaConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
    )
    model = LlamaForCausalLM(cfg).eval()
    model.requires_grad_(False)
    return model


def reference_grads(model: torch.nn.Module, token_mask: torch.Tensor) -> list[torch.Tensor]:
    """Gradient of sum over masked tokens of -coef log pi(y_t), one plain backward, float64."""
    ref = copy.deepcopy(model).double().requires_grad_(True)
    loss = torch.zeros((), dtype=torch.float64)
    offset = 0
    for (prompt, answer), coef in zip(SEQS, COEFS, strict=True):
        logits = ref(torch.tensor([prompt + answer])).logits[0] / TEMPERATURE  # (T, V)
        logp = logits[len(prompt) - 1 : -1].log_softmax(-1)  # (L, V)
        lp = logp.gather(-1, torch.tensor(answer)[:, None]).squeeze(-1)
        loss = loss - coef * (lp * token_mask[offset : offset + len(answer)]).sum()
        offset += len(answer)
    params = list(ref.parameters())
    return list(torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True))


def one_hot(t: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(t), N).bool()


def flat_norm(grads: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(g.pow(2).sum()) for g in grads))


@functools.cache
def single_token_grads(tied: bool) -> list[list[torch.Tensor]]:
    """Per-token gradients from N independent forward + backward passes, one per token."""
    model = tiny_llama(tied)
    return [reference_grads(model, one_hot(t)) for t in range(N)]


def single_token_norms(tied: bool) -> torch.Tensor:
    return torch.tensor([flat_norm(g) for g in single_token_grads(tied)], dtype=torch.float64)


# batch_elements 1: one backward per token; 2**20: vmapped blocks of tokens
@pytest.mark.parametrize(("tied", "batch_elements"), [(False, 2**20), (True, 2**20), (True, 1)])
def test_per_token_norms_equal_single_token_backward(tied: bool, batch_elements: int) -> None:
    grads = exact_token_gradients(
        tiny_llama(tied), SEQS, COEFS, TEMPERATURE, {"m": MASK}, "float64", batch_elements
    )
    expected = single_token_norms(tied)
    assert expected[:7].min() > 0 and expected[7:].abs().max() == 0  # last answer: A = 0
    torch.testing.assert_close(grads.true_norm, expected, rtol=1e-5, atol=1e-12)
    assert grads.tied_embeddings is tied


def test_head_formula_equals_autograd_on_untied_head() -> None:
    model = tiny_llama(tied=False)
    grads = exact_token_gradients(model, SEQS, COEFS, TEMPERATURE, {}, "float64")
    head_index = [n for n, _ in model.named_parameters()].index("lm_head.weight")
    expected = torch.tensor(
        [float(g[head_index].norm()) for g in single_token_grads(False)], dtype=torch.float64
    )
    torch.testing.assert_close(grads.head_norm, expected, rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(grads.head_param_norm, expected, rtol=1e-5, atol=1e-12)


def test_tied_head_norm_is_only_the_output_projection_part() -> None:
    model = tiny_llama(tied=True)
    grads = exact_token_gradients(model, SEQS, COEFS, TEMPERATURE, {}, "float64")
    live = grads.true_norm > 0
    # the shared matrix also gets the input-embedding path, so autograd's norm differs
    assert not torch.allclose(grads.head_norm[live], grads.head_param_norm[live], rtol=1e-3)


def test_selected_gradient_sums_match_masked_loss_backward() -> None:
    model = tiny_llama(tied=True)
    masks = {"m": MASK, "all": torch.ones(N, dtype=torch.bool)}
    grads = exact_token_gradients(model, SEQS, COEFS, TEMPERATURE, masks, "float64")
    g_sel = reference_grads(model, MASK)
    g_full = reference_grads(model, torch.ones(N, dtype=torch.bool))
    dot = sum(float((a * b).sum()) for a, b in zip(g_sel, g_full, strict=True))
    assert grads.full_norm == pytest.approx(flat_norm(g_full), rel=1e-6)
    assert grads.selected_norm["m"] == pytest.approx(flat_norm(g_sel), rel=1e-6)
    assert grads.selected_dot_full["m"] == pytest.approx(dot, rel=1e-6)
    assert grads.selected_norm["all"] == pytest.approx(grads.full_norm, rel=1e-12)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    folder = save_tiny_model(Path(tmp_path_factory.mktemp("gradcheck")) / "llama", "llama")
    return load_model(folder, device="cpu", dtype="float32")


def group(rewards: list[float], prompt: str = "Q: 47+38=?") -> GroupInput:
    answers = ["A: 7+8=15 carry 1", "answer 85", "The answer is 42."]
    return GroupInput(prompt, answers=answers, rewards=rewards)


def test_gradcheck_end_to_end_leaves_base_model_unchanged(tiny_lm: LoadedModel) -> None:
    before = {n: p.detach().clone() for n, p in tiny_lm.model.named_parameters()}
    result = gradcheck(tiny_lm, [group([1.0, 0.0, 0.25])], AnalysisConfig(), precision="float64")
    for name, p in tiny_lm.model.named_parameters():
        assert torch.equal(p, before[name]) and not p.requires_grad and p.grad is None
    n = sum(a.length for _, a in result.analysis.iter_answers())
    assert n == result.fidelity["num_tokens"] == result.gradients.true_norm.numel()
    assert bool((result.gradients.true_norm > 0).all() and (result.gradients.head_norm > 0).all())
    fid = result.fidelity
    assert fid["cosine_to_full"]["all"] == pytest.approx(1.0, abs=1e-12)
    assert fid["norm_ratio_to_full"]["all"] == pytest.approx(1.0, abs=1e-12)
    assert fid["true_grad_coverage"]["all"] == 1.0
    for m in AnalysisConfig().methods:
        assert 0.0 <= fid["true_grad_coverage"][m] <= 1.0
        assert 0.0 <= fid["true_grad_sq_coverage"][m] <= 1.0
        assert -1.0 <= fid["cosine_to_full"][m] <= 1.0
        rho = fid["spearman"][m]["batch"]
        assert rho is None if m == "all" else -1.0 <= rho <= 1.0
    assert fid["max_abs_logprob_diff"] < 1e-5  # the same tokens as the analysis saw
    assert result.precision == "float64"


def test_gradcheck_batch_form_and_zero_signal_group(tiny_lm: LoadedModel) -> None:
    groups = [group([1.0, 0.0, 0.0]), group([1.0, 1.0, 1.0], prompt="Q: 12+30=?")]
    result = gradcheck(tiny_lm, groups, AnalysisConfig(ratio=0.5))
    first = sum(a.length for a in result.analysis.groups[0].answers)  # the second group's tokens:
    assert bool((result.gradients.true_norm[first:] == 0).all())  # zero signal, zero gradient
    assert bool((result.gradients.head_norm[first:] == 0).all())
    assert result.fidelity["cosine_to_full"]["all"] == pytest.approx(1.0, abs=1e-9)

    zero = gradcheck(tiny_lm, [group([1.0, 1.0, 1.0])])
    assert zero.fidelity["cosine_to_full"]["gmts"] is None
    assert any("no gradient" in note for note in zero.fidelity["notes"])


def test_gradcheck_limits(tiny_lm: LoadedModel) -> None:
    with pytest.raises(LimitExceededError, match="exceed the exact-gradient limit of 3"):
        gradcheck(tiny_lm, [group([1.0, 0.0, 0.5])], max_tokens=3)
    with pytest.raises(InvalidInputError, match="precision"):
        gradcheck(tiny_lm, [group([1.0, 0.0, 0.5])], precision="float16")


def test_fidelity_report_against_hand_computation() -> None:
    true = torch.tensor([1.0, 3.0, 2.0, 4.0, 0.5], dtype=torch.float64)
    flat = FlatSelections(
        scores={
            "s": torch.tensor([1.0, 2.0, 3.0, 4.0, 9.0], dtype=torch.float64),
            "all": torch.ones(5, dtype=torch.float64),
        },
        selected={
            "s": torch.tensor([False, False, True, True, False]),
            "all": torch.ones(5, dtype=torch.bool),
        },
        answer_index=torch.tensor([0, 0, 0, 0, 1]),
        logprob=torch.zeros(5, dtype=torch.float64),
    )
    grads = TokenGradients(
        true_norm=true,
        head_norm=true / 2,
        head_param_norm=true / 2,
        logprob=torch.zeros(5, dtype=torch.float64),
        selected_norm={"s": 3.0, "all": 5.0},
        selected_dot_full={"s": 12.0, "all": 25.0},
        full_norm=5.0,
        num_parameters=10,
        tied_embeddings=False,
        seconds=0.0,
    )
    fid = fidelity_report(flat, grads)
    # ranks of s: 1 2 3 4 5, of true: 2 4 3 5 1 -> sum d^2 = 1+4+0+1+16 = 22, rho = 1 - 6*22/120
    assert fid["spearman"]["s"]["batch"] == pytest.approx(1 - 6 * 22 / 120)
    # within answer 0 (answer 1 has one token, no correlation): 1 - 6*(0+1+1+0)/60
    assert fid["spearman"]["s"]["within_answer_median"] == pytest.approx(0.8)
    assert fid["spearman"]["all"]["batch"] is None
    assert fid["true_grad_coverage"]["s"] == pytest.approx(6.0 / 10.5)
    assert fid["true_grad_sq_coverage"]["s"] == pytest.approx(20.0 / 30.25)
    assert fid["cosine_to_full"]["s"] == pytest.approx(12.0 / 15.0)
    assert fid["norm_ratio_to_full"]["s"] == pytest.approx(0.6)
    assert fid["cosine_to_full"]["all"] == pytest.approx(1.0)
    assert fid["spearman_head"]["batch"] == pytest.approx(1.0)


# --- mixture-of-experts models in float64 ---------------------------------------------------


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe"])
def test_float64_runs_moe_experts_eagerly(model_type: str) -> None:
    """The grouped expert kernel has no float64 version: float64 switches the experts to eager
    for the run (and back), and agrees with float32."""
    model = build_tiny(model_type)
    assert model.config._experts_implementation not in (None, "eager")
    before = model.config._experts_implementation
    seqs = [([3, 4, 5], [6, 7, 8, 9]), ([3, 4], [10, 11])]
    masks = {"all": torch.ones(6, dtype=torch.bool)}
    exact = exact_token_gradients(model, seqs, [1.0, -0.5], 1.0, masks, "float64")
    single = exact_token_gradients(model, seqs, [1.0, -0.5], 1.0, masks, "float32")
    assert model.config._experts_implementation == before
    assert bool((exact.true_norm > 0).all())
    torch.testing.assert_close(exact.true_norm, single.true_norm, rtol=1e-4, atol=1e-6)


def test_float64_refuses_experts_that_cannot_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    model = build_tiny("mixtral")

    def refuse(_: str) -> None:
        raise ValueError("MixtralForCausalLM does not support setting experts implementation.")

    monkeypatch.setattr(model, "set_experts_implementation", refuse)
    with pytest.raises(InvalidInputError, match="no float64 version.*--precision float32"):
        exact_token_gradients(model, [([3, 4], [5, 6])], [1.0], 1.0, {}, "float64")
