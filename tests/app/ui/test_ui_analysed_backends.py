"""The UI's two backends answer every analysed-run query alike: the local one calls the
service, the remote one the HTTP routes of a live server (same bodies, same errors)."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from app.live_server import LiveServer
from app.main import create_app
from app.schemas.analysed_runs import AnalysedStepsResponse
from app.schemas.analyze_response import AnalyzeResponse
from app.services.analysed_runs import QUERIES
from app.ui.client import ANALYSED_BODIES, BackendError
from app.ui.local_backend import LocalBackend
from app.ui.remote_backend import RemoteBackend
from gmts_core.errors import GMTSError
from gmts_core.run_dataset.schema import write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import write_step
from tests.app.api_helpers import make_settings

QUERY_PARAMS = {
    "list": {},
    "run": {},
    "steps": {},
    "groups": {"step": 2, "offset": 3, "limit": 5},
    "answers": {"step": 1, "group": 4},
    "tokens": {"step": 1, "group": 4, "answer": 2},
    "rank_answers": {"by": "length", "contains": "wrong", "zero_signal": False, "step_from": 2},
    "rank_tokens": {"by": "rank_gap", "limit": 7, "step_to": 1},
}


def test_local_and_remote_backends_give_the_same_bodies(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "a-run"
    write_manifest(run, ("entropy", "gmts"), {})
    rng = np.random.default_rng(4)
    for step in (1, 2):
        write_step(run, synthetic_step(step, 10, 4, rng))
    settings = make_settings(tmp_path / "models", run_roots=[tmp_path / "runs"], ui_enabled=False)
    app = create_app(settings)
    local = LocalBackend(app.state.services)
    assert set(QUERY_PARAMS) == set(QUERIES)
    with LiveServer(app) as server:
        remote = RemoteBackend(server.url)
        for kind, params in QUERY_PARAMS.items():
            got = remote.analysed(kind, "a-run", dict(params))
            assert got == local.analysed(kind, "a-run", dict(params)), kind
            assert type(got) is ANALYSED_BODIES[kind], kind  # the route's model, typed
            assert any(got.model_dump().values()), kind
        assert remote.capabilities() == local.capabilities()
        assert remote.runs() == local.runs()
        with pytest.raises(GMTSError, match="no analysed step 9"):
            remote.analysed("groups", "a-run", {"step": 9})
        with pytest.raises(GMTSError, match="no analysed step 9"):
            local.analysed("groups", "a-run", {"step": 9})
        # a body that is not the model asked for is the backend's error, named, not a dict
        with pytest.raises(BackendError, match="does not fit AnalyzeResponse"):
            remote._model(AnalyzeResponse, "GET", "/v1/capabilities")


class _Recording:
    """The real local backend, recording which analysed-run queries the UI asks."""

    def __init__(self, backend: LocalBackend) -> None:
        self.backend, self.asked = backend, []

    def analysed(self, kind, run_id="", params=None):  # type: ignore[no-untyped-def]
        self.asked.append(kind)
        return self.backend.analysed(kind, run_id, params)


def test_an_idle_tab_polls_the_runs_row_and_fetches_steps_only_when_they_change(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from app.ui.tabs.runs.analysed import _Handlers

    run = tmp_path / "runs" / "a-run"
    write_manifest(run, ("entropy", "gmts"), {})
    rng = np.random.default_rng(4)
    write_step(run, synthetic_step(1, 4, 4, rng))
    settings = make_settings(tmp_path / "models", run_roots=[tmp_path / "runs"], ui_enabled=False)
    backend = _Recording(LocalBackend(create_app(settings).state.services))
    h = _Handlers(SimpleNamespace(backend=backend))  # type: ignore[arg-type]
    body = h.q(AnalysedStepsResponse, "steps", "a-run").model_dump(mode="json")  # as the state
    backend.asked.clear()
    assert h.poll("a-run", body) == (gr.skip(),) * 5
    assert backend.asked == ["run"]  # unchanged: the run's row only, no step fetched
    write_step(run, synthetic_step(2, 4, 4, rng))
    new = h.poll("a-run", body)[0]
    assert backend.asked == ["run", "run", "steps"]
    assert [r["step"] for r in new["steps"]] == [1, 2]


def test_the_pair_picker_lists_every_pair_the_stored_one_first() -> None:
    from app.ui.tabs.runs.analysed import disagreement_note, pair_choices

    picked = pair_choices(["random", "entropy", "gmts"])
    assert picked["choices"] == ["entropy vs gmts", "random vs entropy", "random vs gmts"]
    assert picked["value"] == "entropy vs gmts"
    assert "counted from every token's selections" in disagreement_note(("random", "gmts"))


def test_a_run_written_while_the_server_is_up_is_listed_by_the_page_loads_refresh(
    tmp_path: Path,
) -> None:
    """What each page load asks (the picker's refresh) lists a run written after the server
    started; a search that matches nothing says so instead of "0 answers match"."""
    from types import SimpleNamespace

    from app.ui.tabs.runs.analysed import ORDER_CHOICES, ZERO_CHOICES, _Handlers

    roots = tmp_path / "runs"
    roots.mkdir()
    settings = make_settings(tmp_path / "models", run_roots=[roots], ui_enabled=False)
    h = _Handlers(SimpleNamespace(backend=LocalBackend(create_app(settings).state.services)))  # type: ignore[arg-type]
    assert h.refresh()["choices"] == []
    write_manifest(roots / "later", ("entropy", "gmts"), {})
    write_step(roots / "later", synthetic_step(1, 4, 4, np.random.default_rng(0)))
    assert [c[0] if isinstance(c, tuple) else c for c in h.refresh()["choices"]] == ["later"]
    _, note = h.find("later", ORDER_CHOICES[0], "no such text anywhere", ZERO_CHOICES[0])
    assert note == "no answer matches"
