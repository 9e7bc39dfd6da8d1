"""GPU paths: token statistics in bf16 on CUDA, bf16 loading with device_map="auto", and TRL
training in bf16. Marked ``gpu``; they skip cleanly where CUDA is not available."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gmts_core.methods.selection import top_k_count
from gmts_core.model.loading import load_model
from gmts_core.stats.metrics import token_stats
from tests.tiny_models import save_tiny_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

QWEN_VOCAB = 151_936  # Qwen2.5's vocabulary: the size the paper's models use


def naive_stats_float64(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> dict[str, torch.Tensor]:
    """logprob, entropy and ||d log p_y / dz|| straight from the definitions, in float64."""
    logp = (logits.double() / temperature).log_softmax(-1)  # (N, V)
    p = logp.exp()
    onehot = torch.nn.functional.one_hot(targets, logits.shape[-1]).double()
    return {
        "logprob": logp.gather(-1, targets[:, None])[:, 0],
        "entropy": -(p * logp).sum(-1),
        "grad_norm": (onehot - p).norm(dim=-1) / temperature,
    }


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_stats_cuda_bf16_equal_cpu_float64(temperature: float) -> None:
    gen = torch.Generator().manual_seed(0)
    n = 256
    logits = (torch.randn(n, QWEN_VOCAB, generator=gen) * 4).to(torch.bfloat16)  # (N, V)
    targets = torch.randint(0, QWEN_VOCAB, (n,), generator=gen)
    targets[:64] = logits[:64].float().argmax(-1)  # confident, likely tokens too
    # the reference sees the same bf16 values, so only the accumulation is compared
    expected = naive_stats_float64(logits, targets, temperature)
    got = token_stats(logits.cuda(), targets.cuda(), temperature=temperature, chunk_size=64)
    for name, want in expected.items():
        value = getattr(got, name).cpu().double()
        torch.testing.assert_close(value, want, rtol=1e-4, atol=1e-4, msg=name)


def test_bf16_load_with_device_map_auto(tmp_path: Path) -> None:
    folder = save_tiny_model(tmp_path / "tiny", "qwen2")
    lm = load_model(folder, dtype="bfloat16", device_map="auto")
    assert lm.dtype == torch.bfloat16
    assert lm.device.type == "cuda"
    assert getattr(lm.model, "hf_device_map", None), "device_map='auto' placed nothing"
    ids = torch.tensor([[1, 2, 3, 4]], device=lm.device)
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits
    assert logits.dtype == torch.bfloat16 and bool(torch.isfinite(logits).all())
    assert not any(p.requires_grad for p in lm.model.parameters())  # base models stay frozen


def test_auto_dtype_is_bf16_on_cuda(tmp_path: Path) -> None:
    folder = save_tiny_model(tmp_path / "tiny", "llama")
    lm = load_model(folder)  # device and dtype "auto"
    assert lm.device.type == "cuda"
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    assert lm.dtype == expected


def test_trl_gmts_training_in_bf16_on_cuda(tmp_path: Path) -> None:
    from tests.gmts_core.integrations.test_trl import make_trainer, tiny_config

    model_dir = save_tiny_model(tmp_path / "tiny", "llama")
    config = tiny_config(tmp_path, use_cpu=False, bf16=True)
    trainer = make_trainer(model_dir, tmp_path, config=config, selection_ratio=0.25)
    trainer.train()
    assert trainer.state.global_step == 2
    applied = trainer.last_selection
    assert applied.local_mask.device.type == "cuda"
    assert int(applied.local_mask.sum()) == top_k_count(0.25, applied.inputs.num_tokens)
    assert bool(torch.isfinite(applied.inputs.grad_proxy).all())


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("fused", [True, False])
def test_kv_sampler_round_trip_on_cuda(tmp_path: Path, arch: str, fused: bool) -> None:
    """On CUDA our sampler draws ``generate``'s tokens for the same seed (one row, no EOS) and
    the statistics it collects from the logits of each draw equal the analysed ones from a
    forward pass, with the fused step and with the model's own body."""
    from gmts_core.sampling.kv_sampler import DecodeRequest, decode
    from gmts_core.sampling.sampler_probe import unserved_reason
    from gmts_core.stats.forward import answer_token_stats

    lm = load_model(save_tiny_model(tmp_path / arch, arch), device="cuda", dtype="float32")
    assert unserved_reason(lm.model) is None
    prompt = [5, 9, 14, 3]
    request = DecodeRequest(1, 8, 0.7, fused=fused, stats_temperature=0.7)
    with torch.random.fork_rng(devices=[lm.device]):
        torch.manual_seed(0)
        (row,) = decode(lm.model, [prompt], request, set())
        torch.manual_seed(0)
        theirs = lm.model.generate(
            torch.tensor([prompt], device=lm.device),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=lm.device),
            do_sample=True, temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=8,
            min_new_tokens=8, eos_token_id=None, pad_token_id=0,
        )[0, len(prompt) :].tolist()  # fmt: skip
    assert row.token_ids == theirs
    assert row.stats is not None
    (stats,) = answer_token_stats(lm.model, [(prompt, row.token_ids)], 0, 0.7)
    for name in ("logprob", "entropy", "grad_norm"):
        torch.testing.assert_close(
            getattr(row.stats.stats, name), getattr(stats.stats, name), atol=1e-4, rtol=1e-4
        )


ANSWERS = [" 7+8=15 carry 1, 4+3+1=8, answer 85", " 7+8=15, 4+3=7, answer 75", " 85", " 86"]


def _flat(result: object, field: str) -> torch.Tensor:
    tokens = [t for g in result.groups for a in g.answers for t in a.tokens]  # type: ignore[attr-defined]
    return torch.tensor([float(getattr(t, field)) for t in tokens], dtype=torch.float64)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_analysis_on_cuda_matches_the_cpu(dtype: str) -> None:
    """The whole analysis of the bundled model on CUDA (float32, bfloat16) against the same on
    the CPU in float32: log-prob, entropy and g within the dtype's rounding, and the selections
    equal but for near-ties (bf16 weights move scores by its ~3 significant digits)."""
    from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
    from gmts_core.demo import DEMO_MODEL_DIR

    groups = [GroupInput("Q: 47+38=?\nA:", answers=ANSWERS, rewards=[1.0, 0.0, 1.0, 0.0])]
    config = AnalysisConfig(ratio=0.2, methods=("entropy", "gmts"), scope="batch")
    cpu = analyze(load_model(DEMO_MODEL_DIR, device="cpu", dtype="float32"), groups, config)
    gpu = analyze(load_model(DEMO_MODEL_DIR, device="cuda", dtype=dtype), groups, config)
    # bf16 weights round each logit to ~3 significant digits: 0.05 in log-prob on this model
    # (seen on the CPU in bf16), so 0.15 absolute; float32 differs by summation order only
    rtol, atol = (1e-4, 1e-4) if dtype == "float32" else (5e-2, 0.15)
    for field in ("logprob", "entropy", "grad_norm"):
        torch.testing.assert_close(_flat(gpu, field), _flat(cpu, field), rtol=rtol, atol=atol)
    for m in config.methods:
        a, b = cpu.selections[m].selected, gpu.selections[m].selected.cpu()
        agree = float((a == b).double().mean())
        assert agree >= (1.0 if dtype == "float32" else 0.9), (m, agree)
