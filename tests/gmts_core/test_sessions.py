"""Sessions: isolation from the base model and each other, exact reset, LoRA, TTL and LRU."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from gmts_core.errors import LimitExceededError
from gmts_core.modeling import LoadedModel, load_model
from gmts_core.policy import PolicySettings, TrainablePolicy, weights_checksum
from gmts_core.rl import RLConfig, RLPrompt
from gmts_core.sessions import SessionBusyError, SessionNotFoundError, SessionStore
from tests.tiny_models import save_tiny_model

PROMPTS = [
    RLPrompt("The answer is", "[aeiou]", "regex"),
    RLPrompt("Q: 47+38=?", "[0-9]", "regex"),
]
CONFIG = RLConfig(group_size=4, max_new_tokens=8, learning_rate=1e-2, beta=0.05)


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(save_tiny_model(tmp_path_factory.mktemp("s") / "llama"), device="cpu")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _metrics(results) -> list[dict]:
    return [{**r.metrics.to_dict(), "seconds": 0} for r in results]


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_reset_restores_bit_identical_weights_and_replays(lm: LoadedModel, kind: str) -> None:
    store = SessionStore()
    session = store.create(lm, CONFIG, PolicySettings(kind=kind), seed=4)
    start = session.policy.checksum()
    with store.use(session.id) as s:
        first = _metrics(s.step(PROMPTS, num_steps=2))
        assert s.policy.checksum() != start
        s.reset()
        assert s.policy.checksum() == start
        assert s.history == []
        assert _metrics(s.step(PROMPTS, num_steps=2)) == first  # fresh optimizer, same seeds


def test_base_weights_unchanged_after_steps_in_two_sessions(lm: LoadedModel) -> None:
    before = weights_checksum(lm.model)
    store = SessionStore()
    for kind in ("full", "lora"):
        session = store.create(lm, CONFIG, PolicySettings(kind=kind))
        start = session.policy.checksum()
        with store.use(session.id) as s:
            s.step(PROMPTS, num_steps=2)
            assert s.policy.checksum() != start  # the policy did train
    assert weights_checksum(lm.model) == before
    assert all(not p.requires_grad for p in lm.model.parameters())


def test_two_sessions_do_not_affect_each_other(lm: LoadedModel) -> None:
    store = SessionStore()
    a = store.create(lm, CONFIG, PolicySettings(kind="full"), seed=9)
    b = store.create(lm, CONFIG, PolicySettings(kind="full"), seed=9)
    b_start = b.policy.checksum()
    with store.use(a.id) as s:
        a_steps = _metrics(s.step(PROMPTS, num_steps=2))
    assert b.policy.checksum() == b_start
    with store.use(b.id) as s:
        assert _metrics(s.step(PROMPTS, num_steps=2)) == a_steps
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
    store = SessionStore()
    config = dataclasses.replace(CONFIG, measure_logprob_after=True)
    session = store.create(lm, config, PolicySettings(kind="lora", lora_rank=4))
    with store.use(session.id) as s:
        first, second = s.step(PROMPTS, num_steps=2)
    assert first.metrics.kl == 0.0 and second.metrics.kl > 0.0
    changes = [t.logprob_after - t.logprob_before for a in first.answers for t in a.tokens]
    assert any(c != 0 for c in changes)


def test_auto_kind_uses_the_size_threshold(lm: LoadedModel) -> None:
    assert TrainablePolicy(lm, PolicySettings(lora_threshold=10**9)).kind == "full"
    assert TrainablePolicy(lm, PolicySettings(lora_threshold=10)).kind == "lora"


def test_ttl_expiry_says_why(lm: LoadedModel) -> None:
    clock = FakeClock()
    store = SessionStore(ttl_s=60, clock=clock)
    session = store.create(lm, CONFIG)
    clock.now = 59
    store.get(session.id)  # a use refreshes the deadline
    clock.now = 59 + 61
    with pytest.raises(SessionNotFoundError, match="expired"):
        store.get(session.id)
    with pytest.raises(SessionNotFoundError, match="does not exist"):
        store.get("nope")
    assert len(store) == 0


def test_lru_cap_evicts_the_least_recently_used_idle_session(lm: LoadedModel) -> None:
    clock = FakeClock()
    store = SessionStore(max_sessions=2, clock=clock)
    first = store.create(lm, CONFIG)
    second = store.create(lm, CONFIG)
    store.get(first.id)  # now `second` is the least recently used
    third = store.create(lm, CONFIG)
    assert set(store.ids()) == {first.id, third.id}
    with pytest.raises(SessionNotFoundError, match="evicted"):
        store.get(second.id)
    with store.use(first.id), store.use(third.id):  # both busy: nothing can be evicted
        with pytest.raises(LimitExceededError):
            store.create(lm, CONFIG)


def test_one_step_at_a_time_per_session(lm: LoadedModel) -> None:
    store = SessionStore()
    session = store.create(lm, CONFIG)
    with store.use(session.id):
        with pytest.raises(SessionBusyError):
            with store.use(session.id):
                pass
    with store.use(session.id):  # released again
        pass


def test_delete_and_concurrent_steps_in_threads(lm: LoadedModel) -> None:
    store = SessionStore()
    sessions = [store.create(lm, CONFIG, seed=i) for i in range(2)]
    errors: list[BaseException] = []

    def run(session_id: str) -> None:
        try:
            with store.use(session_id, wait_s=30) as s:
                s.step(PROMPTS)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s.id,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [len(s.history) for s in sessions] == [1, 1]
    store.delete(sessions[0].id)
    with pytest.raises(SessionNotFoundError, match="deleted"):
        store.get(sessions[0].id)
    assert torch.is_tensor(next(sessions[1].policy.model.parameters()))
