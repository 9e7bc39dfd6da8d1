"""What every tab of the UI is built from: a :class:`UIContext`, the :class:`Tab` registration
record, and :func:`call`, the one way a handler calls the backend.

A tab is a package under :mod:`app.ui.tabs` exposing ``TAB = Tab(title, id, build)``; the Blocks
(:mod:`app.ui.blocks`) build the tabs listed in :data:`app.ui.tabs.TABS`, in order, each inside
its own ``gr.Tab`` with one ``UIContext`` shared by all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import gradio as gr

from app.core.config import Settings
from app.schemas.server import CapabilitiesResponse
from app.ui.client import Backend
from app.ui.uploads import SessionUploads
from gmts_core.errors import GMTSError

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class UIContext:
    """What every tab builder can reach: the backend, the settings, and the state and
    components that tabs share (filled by the tab that creates them, in the order of ``TABS``).

    ``result`` holds the current analysis (the API's JSON body of ``POST /v1/analyze``) or None;
    ``group`` is Explore's drill-down dropdown (which group of a batch the views show) and
    ``learn_view`` the HTML that Explore's handlers fill and the Learn tab renders.
    """

    backend: Backend
    settings: Settings
    result: gr.State
    capabilities: CapabilitiesResponse  # the backend's GET /v1/capabilities
    group: gr.Dropdown | None = None
    learn_view: gr.HTML | None = None
    # the files each browser session uploaded, deleted when it ends (the Blocks' unload)
    uploads: SessionUploads = field(default_factory=SessionUploads)


TabBuilder = Callable[[UIContext], None]


@dataclass(frozen=True)
class Tab:
    """One tab of the UI: its title, its id (``elem_id`` is ``tab-<id>``) and its builder."""

    title: str
    id: str
    build: TabBuilder


def call(fn: Callable[[], T]) -> T:
    """Run a backend (or library) call for a handler, turning library errors into ``gr.Error``
    with the library's message (what the person sees in the UI's toast). An ordinary input
    error is logged as one line, not a traceback (Gradio prints one for every other error)."""
    try:
        return fn()
    except GMTSError as exc:
        logger.info("UI request refused: %s: %s", type(exc).__name__, exc)
        raise gr.Error(str(exc), print_exception=False) from None
