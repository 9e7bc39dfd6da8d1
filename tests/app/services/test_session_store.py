"""The session store: time-to-live, least-recently-used eviction, one caller at a time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from app.services.errors import SessionBusyError, SessionNotFoundError
from app.services.session_store import SessionCapError, SessionStore
from gmts_core.config import RLConfig
from gmts_core.experiments import session_state
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


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
        with pytest.raises(SessionCapError, match="GMTS_MAX_SESSIONS"):
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


def test_memory_cap_evicts_and_counts_five_copies_of_the_trainable_weights(lm: LoadedModel) -> None:
    probe = SessionStore().create(lm, CONFIG)
    per_copy = sum(p.numel() * p.element_size() for p in probe.policy.trainable_parameters())
    assert probe.memory_bytes() == 5 * per_copy  # weights, start copy, grads, 2 AdamW moments
    store = SessionStore(max_sessions=100, max_bytes=2.5 * probe.memory_bytes(), clock=FakeClock())
    ids = [store.create(lm, CONFIG).id for _ in range(3)]
    assert store.ids() == ids[1:] and store.evicted == 1  # two fit in 2.5 sessions' memory
    with pytest.raises(SessionNotFoundError, match="evicted"):
        store.get(ids[0])


def test_a_delete_during_the_save_of_a_step_is_not_an_error(
    lm: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session deleted while its state is written (the step's save after each step, the
    delete from another request) loses the folder under the write: the save ends quietly and
    leaves nothing behind, so the step stops with the session's 404, not a server error. A
    write that fails while the session still exists still raises."""
    store = SessionStore(state_dir=tmp_path)
    session = store.create(lm, CONFIG)
    store.save(session)
    real = session_state._write_json

    def deleted_midway(path: Path, data: dict) -> None:
        store.delete(session.id)  # removes the folder, as DELETE /v1/sessions/{id} does
        real(path, data)  # the write of meta.json then finds no folder

    monkeypatch.setattr(session_state, "_write_json", deleted_midway)
    store.save(session)
    assert not (tmp_path / session.id).exists()
    with pytest.raises(SessionNotFoundError):
        store.get(session.id)

    # the same race at the weights' write (safetensors raises its own error, not OSError)
    other = store.create(lm, CONFIG)
    monkeypatch.setattr(session_state, "_write_json", real)
    real_save_file = session_state.save_file

    def weights_lost(tensors: dict, path: str) -> None:
        store.delete(other.id)
        real_save_file(tensors, path)

    monkeypatch.setattr(session_state, "save_file", weights_lost)
    store.save(other)
    assert not (tmp_path / other.id).exists()
    monkeypatch.setattr(session_state, "save_file", real_save_file)

    kept = store.create(lm, CONFIG)

    def fails(path: Path, data: dict) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(session_state, "_write_json", fails)
    with pytest.raises(OSError, match="disk full"):
        store.save(kept)
