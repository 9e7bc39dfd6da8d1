"""The Gradio Blocks of GMTS Explorer: the tabs of :data:`TABS`, each built by its package under
:mod:`app.ui.tabs` from one shared :class:`app.ui.context.UIContext`.

A new tab is a package ``app/ui/tabs/<tab>/`` whose ``tab.py`` defines ``TAB``, added to
:data:`TABS`; tabs built later can read what earlier ones shared on the context (Learn renders
Explore's view; Proxy check reads Explore's drill-down group).
"""

from __future__ import annotations

import logging

import gradio as gr

from app.core.config import Settings
from app.schemas.server import CapabilitiesResponse
from app.services.catalog import capabilities
from app.ui.client import Backend
from app.ui.context import Tab, UIContext
from app.ui.tabs.compare.tab import TAB as COMPARE
from app.ui.tabs.explore import example
from app.ui.tabs.explore.tab import TAB as EXPLORE
from app.ui.tabs.learn.tab import TAB as LEARN
from app.ui.tabs.proxy.tab import TAB as PROXY
from app.ui.tabs.runs.tab import TAB as RUNS
from app.ui.tabs.train.tab import TAB as TRAIN
from gmts_core.errors import GMTSError

logger = logging.getLogger(__name__)

TABS: tuple[Tab, ...] = (EXPLORE, LEARN, TRAIN, COMPARE, PROXY, RUNS)
"""Every tab of the UI, in order (Learn and Proxy check read what Explore shares)."""

# "Hover" with a mouse, "Tap" on a touch screen (static/gmts.css shows one: `hover: none`)
POINT_AT = '<span class="on-hover">Hover</span><span class="on-touch">Tap</span>'
INTRO = (
    "**GMTS Explorer — which answer tokens drive learning?** Sample a group of answers "
    "(or paste your own), reward them, and compare which tokens two "
    "selection methods would train on: **entropy** (the 80/20 rule) vs **gmts** (gradient "
    f"magnitude). {POINT_AT} a token for its numbers."
)


def backend_capabilities(backend: Backend) -> CapabilitiesResponse:
    """What the backend offers (its methods, rules, limits); the local catalog if a remote
    server cannot be asked (the UI still builds, and says so in the log)."""
    try:
        return backend.capabilities()
    except GMTSError as exc:
        logger.warning("cannot ask the backend for its capabilities: %s", exc)
        return capabilities(Settings())


def build_blocks(backend: Backend, settings: Settings, tabs: tuple[Tab, ...] = TABS) -> gr.Blocks:
    """The whole UI: the intro line, then ``tabs`` in order, sharing one context."""
    with gr.Blocks(title="GMTS Explorer", fill_width=True) as demo:
        gr.Markdown(INTRO + f" Backend: `{backend.label}`.", elem_id="intro")
        # the page opens on the shipped example group, already analysed (see tabs.explore.example)
        ctx = UIContext(
            backend,
            settings,
            gr.State(example.load_example()),
            capabilities=backend_capabilities(backend),
        )
        with gr.Tabs():
            for tab in tabs:
                with gr.Tab(tab.title, id=tab.id, elem_id=f"tab-{tab.id}"):
                    tab.build(ctx)
        demo.unload(ctx.uploads.release)  # a closed tab's uploads go now, not at the TTL
    # No limit per event in Gradio's queue: the heavy work of every event goes through the
    # server's job queue (GMTS_MAX_CONCURRENT_JOBS at once, first come first served), which
    # notifies each person their place. Gradio's default (one run of each event at a time, for all
    # users together) would make a second student's Train run wait for the whole of the first
    # one's, instead of their steps taking turns. The Runs tab keeps its own ordered queues.
    demo.queue(default_concurrency_limit=None)
    return demo
