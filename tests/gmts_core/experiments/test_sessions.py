"""Sessions: isolation from the base model and each other, exact reset, LoRA."""

from __future__ import annotations

import dataclasses

import pytest

from gmts_core.config import RLConfig
from gmts_core.experiments.sessions import Session
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy, weights_checksum
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.model.loading import LoadedModel, load_model
from tests.tiny_models import save_tiny_model

PROMPTS = [
    RLPrompt("The answer is", "[aeiou]", "regex"),
    RLPrompt("Q: 47+38=?", "[0-9]", "regex"),
]
CONFIG = RLConfig(group_size=4, max_new_tokens=8, learning_rate=1e-2, beta=0.05)


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(save_tiny_model(tmp_path_factory.mktemp("s") / "llama"), device="cpu")


def new_session(
    lm: LoadedModel, config: RLConfig = CONFIG, policy: PolicySettings | None = None, seed: int = 0
) -> Session:
    return Session(f"s{seed}", TrainablePolicy(lm, policy), config, seed)


def _metrics(results) -> list[dict]:
    """The steps' metrics as plain values (NaN as None, so equal runs compare equal), no timing."""
    plain = [dataclasses.asdict(dataclasses.replace(r.metrics, seconds=0.0)) for r in results]
    return [{k: None if v != v else v for k, v in m.items()} for m in plain]


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_reset_restores_bit_identical_weights_and_replays(lm: LoadedModel, kind: str) -> None:
    s = new_session(lm, CONFIG, PolicySettings(kind=kind), seed=4)
    start = s.policy.checksum()
    first = _metrics(s.step(PROMPTS, num_steps=2))
    assert s.policy.checksum() != start
    s.reset()
    assert s.policy.checksum() == start
    assert s.history == []
    assert _metrics(s.step(PROMPTS, num_steps=2)) == first  # fresh optimizer, same seeds


def test_base_weights_unchanged_after_steps_in_two_sessions(lm: LoadedModel) -> None:
    before = weights_checksum(lm.model)
    for kind in ("full", "lora"):
        s = new_session(lm, CONFIG, PolicySettings(kind=kind))
        start = s.policy.checksum()
        s.step(PROMPTS, num_steps=2)
        assert s.policy.checksum() != start  # the policy did train
    assert weights_checksum(lm.model) == before
    assert all(not p.requires_grad for p in lm.model.parameters())


def test_two_sessions_do_not_affect_each_other(lm: LoadedModel) -> None:
    a = new_session(lm, CONFIG, PolicySettings(kind="full"), seed=9)
    b = new_session(lm, CONFIG, PolicySettings(kind="full"), seed=9)
    b_start = b.policy.checksum()
    a_steps = _metrics(a.step(PROMPTS, num_steps=2))
    assert b.policy.checksum() == b_start
    assert _metrics(b.step(PROMPTS, num_steps=2)) == a_steps
    assert a.policy.checksum() == b.policy.checksum()
    assert len(a.history) == len(b.history) == 2


def test_lora_policy_on_a_tiny_llama(lm: LoadedModel) -> None:
    policy = TrainablePolicy(lm, PolicySettings(kind="lora", lora_rank=4))
    assert policy.kind == "lora"
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert policy.num_trainable < lm.num_parameters / 2
    # the frozen weights are the base model's own tensors: shared, not copied
    base_ptrs = {p.data_ptr() for p in lm.model.parameters()}
    frozen = [p for p in policy.model.parameters() if not p.requires_grad]
    assert all(p.data_ptr() in base_ptrs for p in frozen)
    assert not any("lora" in n for n, _ in lm.model.named_modules())  # base tree untouched
    config = dataclasses.replace(CONFIG, measure_logprob_after=True)
    session = new_session(lm, config, PolicySettings(kind="lora", lora_rank=4))
    first, second = session.step(PROMPTS, num_steps=2)
    assert first.metrics.kl == 0.0 and second.metrics.kl > 0.0
    changes = [t.logprob_change for a in first.answers for t in a.tokens]
    assert all(c is not None for c in changes) and any(c != 0 for c in changes)


def test_auto_kind_uses_the_size_threshold(lm: LoadedModel) -> None:
    assert TrainablePolicy(lm, PolicySettings(lora_threshold=10**9)).kind == "full"
    assert TrainablePolicy(lm, PolicySettings(lora_threshold=10)).kind == "lora"


def test_a_step_is_shown_once_its_progress_callback_has_heard_it(lm: LoadedModel) -> None:
    """A server saves the session in ``progress``; a reader (GET) sees a step only after that,
    so a crash before the save never loses a step a client has seen."""
    s = new_session(lm, seed=2)
    s.step(PROMPTS)  # one step already done and heard
    seen: list[tuple[int, int]] = []  # (steps done, steps shown) inside each callback
    s.step(PROMPTS, 2, progress=lambda *_: seen.append((s.steps_done, len(s.shown_history))))
    assert seen == [(2, 1), (3, 2)]  # the step being saved is not shown yet
    assert len(s.shown_history) == s.steps_done == 3  # all shown once the steps are over
    s.step(PROMPTS)  # no callback: nothing is held back
    assert s.shown_history == s.history
