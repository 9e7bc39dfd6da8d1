"""GMTSGRPOTrainer: real TRL training steps on CPU, masks equal gmts_core selection, and the
loss equals TRL's plain GRPO loss when every token is kept."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.errors import InvalidInputError, UnknownNameError
from gmts_core.integrations.trl import GMTSGRPOTrainer
from gmts_core.integrations.trl_selection import TRL_LOSS_AGGREGATION, grad_norm_from_logprob
from gmts_core.methods.aggregation import list_aggregations, loss_weights
from gmts_core.methods.selection import SelectionInputs, list_methods, select, top_k_count
from gmts_core.stats.metrics import grad_proxy, token_stats
from tests.multiprocess import torchrun
from tests.tiny_models import save_tiny_model

REPO = Path(__file__).resolve().parents[3]
PROMPTS = [f"Q: {a}+{b}=?\nA:" for a, b in [(47, 38), (23, 14), (52, 37), (86, 59)] * 4]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled demo model once it exists, else a tiny random Llama."""
    if (DEMO_MODEL_DIR / "config.json").is_file():
        return DEMO_MODEL_DIR
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama")


def text_reward(completions: list[str], **_: Any) -> list[float]:
    """A deterministic reward that varies between completions, so advantages are non-zero."""
    return [float(sum(map(ord, c)) % 5) for c in completions]


def tiny_config(out: Path, **overrides: Any) -> GRPOConfig:
    settings: dict[str, Any] = dict(
        output_dir=str(out),
        max_completion_length=16,
        num_generations=4,
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=1e-2,
        report_to="none",
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16 autocast, on CPU too; float32 keeps comparisons tight
        gradient_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def make_trainer(
    model_dir: Path, out: Path, cls: type = GMTSGRPOTrainer, config: Any = None, **kwargs: Any
) -> Any:
    return cls(
        model=str(model_dir),
        reward_funcs=text_reward,
        args=config or tiny_config(out),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        **kwargs,
    )


def one_batch(trainer: Any) -> dict[str, Any]:
    """One generated, scored batch (prompt/completion ids, advantages...) from ``trainer``."""
    trainer.model.eval()  # TRL generates and scores the batch directly in eval mode
    torch.manual_seed(0)
    return trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))


# --- training steps --------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["gmts", "entropy"])
def test_two_training_steps_on_cpu(model_dir: Path, tmp_path: Path, method: str) -> None:
    ratio = 0.25
    trainer = make_trainer(model_dir, tmp_path, token_selection=method, selection_ratio=ratio)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()

    assert trainer.state.global_step == 2
    logs = [log for log in trainer.state.log_history if "gmts/selected_fraction" in log]
    assert len(logs) == 2
    applied = trainer.last_selection
    n = applied.inputs.num_tokens
    assert int(applied.local_mask.sum()) == top_k_count(ratio, n)
    assert logs[-1]["gmts/selected_fraction"] == pytest.approx(top_k_count(ratio, n) / n)
    for log in logs:
        if "gmts/gradient_coverage" in log:  # a batch with some learning signal
            assert 0.0 < log["gmts/gradient_coverage"] <= 1.0
            # GMTS keeps the most gradient mass of any selection of the same size
            assert log["gmts/gradient_coverage_gmts"] >= log["gmts/gradient_coverage_entropy"]
            assert 0.0 <= log["gmts/overlap_entropy_gmts"] <= 1.0
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "two optimizer steps left every parameter unchanged"


# --- the applied mask is gmts_core's selection -----------------------------------------------


def reference_selection(
    trainer: GMTSGRPOTrainer, inputs: dict[str, Any], method: str, seed: int
) -> tuple[torch.Tensor, SelectionInputs, torch.Tensor]:
    """gmts_core's selection, its inputs and w_i A_i per token, computed independently:
    plain logits -> gmts_core.stats.metrics -> gmts_core.methods.selection."""
    prompt, completion = inputs["prompt_ids"], inputs["completion_ids"]
    valid = inputs["completion_mask"].bool()  # (B, T)
    with torch.no_grad():
        logits = trainer.model(
            input_ids=torch.cat([prompt, completion], dim=1),
            attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
        ).logits  # (B, P + T, V)
    logits = logits[:, prompt.shape[1] - 1 : -1]  # (B, T, V) the logits that predict each token
    stats = token_stats(logits[valid], completion[valid], temperature=trainer.temperature)
    answer = valid.nonzero()[:, 0]  # (N,)
    weights = loss_weights(
        valid.sum(1), TRL_LOSS_AGGREGATION[trainer.loss_type], trainer.max_completion_length
    )[answer]
    advantage = inputs["advantages"].double()[answer]
    x = SelectionInputs(
        entropy=stats.entropy.double(),
        logprob=stats.logprob.double(),
        grad_norm=stats.grad_norm.double(),
        grad_proxy=grad_proxy(advantage, weights, stats.grad_norm.double()),
        signal_scale=advantage.abs() * weights,
        answer_index=answer,
        group_index=torch.zeros_like(answer),
        seed=seed,
        advantage=advantage,
    )
    return select(x, method, trainer.selection_ratio).selected, x, advantage * weights


def assert_grad_norm_close(got: torch.Tensor, exact: torch.Tensor, logprob: torch.Tensor) -> None:
    """Within 1e-3 relative for every token, confident ones included (the trainer recomputes
    those from their logits)."""
    torch.testing.assert_close(got, exact, rtol=1e-3, atol=1e-9)
    assert bool((logprob > math.log(0.99)).any()), "the batch should hold confident tokens"


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_applied_mask_equals_gmts_core_selection(
    model_dir: Path, tmp_path: Path, loss_type: str
) -> None:
    config = tiny_config(tmp_path, loss_type=loss_type)
    trainer = make_trainer(model_dir, tmp_path, config=config, selection_ratio=0.3)
    inputs = one_batch(trainer)
    valid = inputs["completion_mask"].bool()
    assert inputs["advantages"].abs().sum() > 0, "the test batch needs a learning signal"
    for method in list_methods():
        trainer.token_selection = method
        loss = trainer.compute_loss(trainer.model, inputs)
        applied = trainer.last_selection
        expected, x, signed_weight = reference_selection(
            trainer, inputs, method, applied.inputs.seed
        )
        # the trainer's statistics (TRL's fused kernel) are gmts_core.stats.metrics' statistics
        got = applied.inputs
        torch.testing.assert_close(got.entropy, x.entropy, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got.logprob, x.logprob, rtol=1e-4, atol=1e-4)
        assert_grad_norm_close(got.grad_norm, x.grad_norm, x.logprob)
        assert torch.equal(applied.local_mask[valid], expected), method
        assert not applied.local_mask[~valid].any()
        # on-policy every ratio is 1, so TRL's loss is L = -sum_i sum_t w_i A_i m_it
        expected_loss = -(signed_weight * expected.double()).sum()
        assert float(loss) == pytest.approx(float(expected_loss), rel=1e-4, abs=1e-7), method


def test_ratio_one_equals_plain_trl_grpo_loss(model_dir: Path, tmp_path: Path) -> None:
    plain = make_trainer(model_dir, tmp_path / "plain", cls=GRPOTrainer)
    full = make_trainer(model_dir, tmp_path / "gmts", selection_ratio=1.0)
    partial = make_trainer(model_dir, tmp_path / "partial", selection_ratio=0.2)
    inputs = one_batch(plain)

    def loss_and_grads(trainer: Any) -> tuple[torch.Tensor, list[torch.Tensor]]:
        trainer.model.eval()
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, inputs)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in trainer.model.parameters()]

    plain_loss, plain_grads = loss_and_grads(plain)
    full_loss, full_grads = loss_and_grads(full)
    torch.testing.assert_close(full_loss, plain_loss, rtol=1e-6, atol=1e-8)
    for a, b in zip(full_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)
    # the comparison can fail: keeping 20% of the tokens changes the update
    _, partial_grads = loss_and_grads(partial)
    assert any(not torch.allclose(a, b) for a, b in zip(partial_grads, plain_grads, strict=True))


# --- arguments and the loss-type map ----------------------------------------------------------


def test_loss_type_map_names_real_aggregations() -> None:
    assert set(TRL_LOSS_AGGREGATION.values()) <= set(list_aggregations())
    assert TRL_LOSS_AGGREGATION["dapo"] == TRL_LOSS_AGGREGATION["bnpo"] == "token_mean"
    assert TRL_LOSS_AGGREGATION["grpo"] == "seq_mean_token_mean"
    assert TRL_LOSS_AGGREGATION["dr_grpo"] == "seq_mean_token_sum_norm"


def test_bad_arguments_fail_with_clear_errors(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="gmts_entropy"):
        make_trainer(model_dir, tmp_path, token_selection="nope")
    with pytest.raises(ValueError, match="ratio"):
        make_trainer(model_dir, tmp_path, selection_ratio=0.0)
    with pytest.raises(InvalidInputError, match="top_entropy_quantile"):
        make_trainer(model_dir, tmp_path, config=tiny_config(tmp_path, top_entropy_quantile=0.2))
    with pytest.raises(InvalidInputError, match="luspo"):
        cfg = tiny_config(tmp_path, loss_type="luspo", importance_sampling_level="sequence")
        make_trainer(model_dir, tmp_path, config=cfg)


def test_grad_norm_from_logprob_matches_formula_and_survives_confident_tokens() -> None:
    torch.manual_seed(0)
    logits = torch.randn(64, 50, dtype=torch.float64) * 3
    logits[:8, 0] += 20.0  # confident tokens: 1 - p ~ 1e-5, where float32 sums cancel
    logp = logits.log_softmax(-1)  # (64, 50)
    probs = logp.exp()
    miss = probs[:, 1:].sum(-1)  # 1 - p, without cancellation
    exact = (miss.square() + probs[:, 1:].square().sum(-1)).sqrt()  # ||d log p_0 / dz||
    log_sum_sq = probs.square().sum(-1).log()
    # the kernel hands over float32 values
    got = grad_norm_from_logprob(logp[:, 0].float(), log_sum_sq.float(), 1.0, 50)
    torch.testing.assert_close(got[8:], exact[8:], rtol=1e-5, atol=1e-7)
    ratio = got[:8] / exact[:8]  # the clamp keeps g within a factor sqrt(2)
    assert bool(((ratio >= 1 / math.sqrt(2)) & (ratio <= math.sqrt(2))).all()), ratio
    assert float(miss[:8].min()) < 1e-7  # the case really is a confident one
    at_tau2 = grad_norm_from_logprob(logp[:, 0].float(), log_sum_sq.float(), 2.0, 50)
    torch.testing.assert_close(at_tau2, got / 2.0)  # the 1 / tau factor


# --- the example, end to end -------------------------------------------------------------------


def test_example_runs_end_to_end_on_cpu(model_dir: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import train_trl_gmts
    finally:
        sys.path.remove(str(REPO / "examples"))
    summary = train_trl_gmts.main(
        [
            *("--model", str(model_dir), "--max-steps", "2", "--num-problems", "16"),
            *("--num-generations", "4", "--batch-size", "4", "--max-completion-length", "16"),
            *("--eval-problems", "8", "--output-dir", str(tmp_path / "out"), "--use-cpu"),
        ]
    )
    # the numeric rule gives each answer 0 or 1
    assert 0.0 <= summary["mean_reward_first_half"] <= 1.0
    assert 0.0 <= summary["heldout_accuracy_before"] <= 1.0
    assert 0.0 <= summary["heldout_accuracy_after"] <= 1.0
    assert (tmp_path / "out" / "model.safetensors").is_file()


# --- several processes: the top-k is global --------------------------------------------------

DISTRIBUTED_SCRIPT = """
import json, sys, torch
sys.path.insert(0, {repo!r})
from tests.gmts_core.integrations.test_trl import make_trainer, tiny_config
from pathlib import Path
trainer = make_trainer(Path({model!r}), Path({out!r}), config=tiny_config(Path({out!r}),
    max_steps=1, max_completion_length=12), selection_ratio=0.3)
trainer.train()
a = trainer.last_selection
json.dump({{"n": a.inputs.num_tokens, "k": int(a.selection.selected.sum()),
    "local": int(a.local_mask.sum()), "offset": a.offset,
    "processes": trainer.accelerator.num_processes,
    "slice": int(a.selection.selected[a.offset : a.offset + a.num_local].sum()),
    "grad_proxy": a.inputs.grad_proxy.tolist()}},
    open(Path({out!r}) / f"rank{{trainer.accelerator.process_index}}.json", "w"))
"""


@pytest.mark.slow
def test_two_processes_select_one_global_top_k(model_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(
        DISTRIBUTED_SCRIPT.format(repo=str(REPO), model=str(model_dir), out=str(tmp_path))
    )
    torchrun(script, cwd=REPO)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["processes"] == 2
    assert ranks[0]["grad_proxy"] == ranks[1]["grad_proxy"]  # every process sees the whole batch
    n = ranks[0]["n"]
    assert ranks[0]["k"] == ranks[1]["k"] == top_k_count(0.3, n)
    assert ranks[0]["local"] + ranks[1]["local"] == top_k_count(0.3, n)  # one global top-k
    assert ranks[0]["offset"] == 0 < ranks[1]["offset"] < n
    assert all(r["local"] == r["slice"] for r in ranks)  # each applies its own slice


# --- off-policy and KL: the effective coefficient against TRL's own loss --------------------


@pytest.mark.parametrize("bias_corrected_kl", [True, False])
def test_coefficient_equals_autograd_of_trl_loss_off_policy_with_kl(
    model_dir: Path, tmp_path: Path, bias_corrected_kl: bool
) -> None:
    """num_iterations=2, beta>0: per token, -dL/dlogp of TRL's own loss (autograd through its
    fused kernel's log-probs) is w omega, gamma is |dL/dlogp| g, and the clip flag marks exactly
    the tokens whose clipped objective is flat; ratios pushed far from 1 on both sides."""
    config = tiny_config(
        tmp_path,
        loss_type="grpo",
        num_iterations=2,
        beta=0.2,
        use_bias_correction_kl=bias_corrected_kl,
    )
    trainer = make_trainer(model_dir, tmp_path, config=config, token_selection="all")
    inputs = one_batch(trainer)
    valid = inputs["completion_mask"].bool()
    assert inputs.get("old_per_token_logps") is not None and "ref_per_token_logps" in inputs
    n = int(valid.sum())
    offsets = torch.zeros_like(inputs["old_per_token_logps"])
    offsets[valid] = torch.linspace(-0.9, 0.9, n)[
        torch.randperm(n, generator=torch.Generator().manual_seed(0))
    ]
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] - offsets  # r = e^offset
    inputs["ref_per_token_logps"] = inputs["ref_per_token_logps"] + offsets.flip(0)
    kept: list[torch.Tensor] = []
    select = trainer.get_high_entropy_mask

    def keep_logps(*args: Any) -> torch.Tensor:
        kept.extend(o.log_probs for o in trainer._captured)
        return select(*args)

    trainer.get_high_entropy_mask = keep_logps  # type: ignore[method-assign]
    trainer.model.eval()
    loss = trainer.compute_loss(trainer.model, inputs)
    width = valid.shape[1]
    grads = torch.autograd.grad(loss, kept)
    dlogp = torch.cat([g[:, -width:] for g in grads])[valid].double()  # (n,)
    x = trainer.last_selection.inputs
    assert x.coef is not None and x.clipped is not None and x.ratio is not None
    weights = loss_weights(valid.sum(1), "seq_mean_token_mean")[valid.nonzero()[:, 0]]
    torch.testing.assert_close(-weights * x.coef, dlogp, rtol=1e-4, atol=1e-9)
    _, exact, _ = reference_selection(trainer, inputs, "all", 0)
    torch.testing.assert_close(x.grad_proxy, dlogp.abs() * exact.grad_norm, rtol=1e-3, atol=1e-9)
    adv = inputs["advantages"].double()[valid.nonzero()[:, 0]]
    r = x.ratio
    flat = ((r > 1 + trainer.epsilon_high) & (adv > 0)) | (
        (r < 1 - trainer.epsilon_low) & (adv < 0)
    )
    assert torch.equal(x.clipped, flat)
    assert bool((flat & (adv > 0)).any()) and bool((flat & (adv < 0)).any())
    torch.testing.assert_close(r, torch.exp(offsets[valid].double()), rtol=1e-4, atol=1e-5)


def test_trl_grad_norm_is_stable_for_confident_tokens(model_dir: Path, tmp_path: Path) -> None:
    """A model made very confident (head scaled): the trainer's g within 1e-3 of the float64
    value for p up to 0.99999, and 0 only where the float64 value underflows."""
    trainer = make_trainer(model_dir, tmp_path, token_selection="gmts")
    with torch.no_grad():
        trainer._base_model().get_output_embeddings().weight.mul_(4.0)
    inputs = one_batch(trainer)
    trainer.compute_loss(trainer.model, inputs)
    x = trainer.last_selection.inputs
    _, ref, _ = reference_selection(trainer, inputs, "gmts", 0)
    valid = inputs["completion_mask"].bool()
    with torch.no_grad():  # float64 g of the very same float32 logits
        logits = (
            trainer.model(
                input_ids=torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            )
            .logits[:, inputs["prompt_ids"].shape[1] - 1 : -1][valid]
            .double()
            / trainer.temperature
        )
    pi = logits.softmax(-1)
    y = inputs["completion_ids"][valid]
    p = pi.gather(-1, y[:, None])[:, 0]
    g64 = (pi - torch.nn.functional.one_hot(y, pi.shape[-1])).norm(dim=-1) / trainer.temperature
    assert bool((p > 0.99999).any()) and bool(((p > 0.99) & (p < 0.99999)).any())
    upto = p <= 0.99999
    torch.testing.assert_close(x.grad_norm[upto], g64[upto], rtol=1e-3, atol=0.0)
    assert bool(((x.grad_norm == 0) <= (g64 < 1e-300)).all())
    del ref
