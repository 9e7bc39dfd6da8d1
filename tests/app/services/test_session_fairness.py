"""Fair sharing of sessions between clients (issue 36, item 8).

One client cannot push out the sessions of others: it holds at most ``per_client`` sessions
(429 beyond), making room evicts its own idle sessions first, and another client's only when
that client holds more sessions than this one will.
"""

from __future__ import annotations

import pytest

from app.services.errors import QueueFullError, SessionNotFoundError
from app.services.session_store import SessionCapError, SessionStore
from gmts_core.config import RLConfig
from gmts_core.model.loading import LoadedModel, load_model
from tests.tiny_models import save_tiny_model

CONFIG = RLConfig(group_size=4, max_new_tokens=8)


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(save_tiny_model(tmp_path_factory.mktemp("f") / "llama"), device="cpu")


def test_a_client_past_its_share_gets_429_and_evicts_nobody(lm: LoadedModel) -> None:
    store = SessionStore(max_sessions=6, per_client=2)
    others = [store.create(lm, CONFIG, owner=f"victim-{i}").id for i in range(3)]
    mine = [store.create(lm, CONFIG, owner="flood").id for _ in range(2)]
    for _ in range(10):
        with pytest.raises(SessionCapError, match="GMTS_MAX_SESSIONS_PER_CLIENT") as err:
            store.create(lm, CONFIG, owner="flood")
        assert isinstance(err.value, QueueFullError)  # answered 429 with Retry-After
    assert set(store.ids()) == {*others, *mine}


def test_a_full_server_evicts_the_creators_own_session_first(lm: LoadedModel) -> None:
    store = SessionStore(max_sessions=3, per_client=3)
    a = store.create(lm, CONFIG, owner="a").id
    b1 = store.create(lm, CONFIG, owner="b").id
    b2 = store.create(lm, CONFIG, owner="b").id
    store.get(b1)  # b2 is b's least recently used, a the oldest overall
    b3 = store.create(lm, CONFIG, owner="b").id
    assert set(store.ids()) == {a, b1, b3}
    with pytest.raises(SessionNotFoundError, match="evicted"):
        store.get(b2)


def test_a_client_with_fewer_sessions_is_never_evicted_by_one_with_more(lm: LoadedModel) -> None:
    store = SessionStore(max_sessions=3, per_client=3)
    a = store.create(lm, CONFIG, owner="a").id
    b = [store.create(lm, CONFIG, owner="b").id for _ in range(2)]
    # c holds none: it may take the place of one of b's (b holds more than c will), not a's
    c = store.create(lm, CONFIG, owner="c").id
    assert a in store.ids() and c in store.ids()
    assert len(set(b) & set(store.ids())) == 1
    # now every client holds one: a new client finds nobody holding more, and is refused
    with pytest.raises(SessionCapError, match="GMTS_MAX_SESSIONS"):
        store.create(lm, CONFIG, owner="d")
    assert len(store.ids()) == 3 and a in store.ids() and c in store.ids()


def test_the_servers_own_ui_is_not_capped_per_client(lm: LoadedModel) -> None:
    """The UI's local backend (and the CLI) create sessions without an owner: a classroom
    behind one address past GMTS_MAX_SESSIONS_PER_CLIENT still gets a session each (the Train
    tab's 9th student was refused), bounded only by max_sessions."""
    store = SessionStore(max_sessions=6, per_client=2)
    ui = [store.create(lm, CONFIG).id for _ in range(5)]
    assert set(store.ids()) == set(ui)
    api = store.create(lm, CONFIG, owner="203.0.113.7")  # an API client beside them
    assert api.id in store.ids()
