"""Fixtures for browser tests: Debian's Chromium through Playwright, live app servers.

Never downloads a browser: the tests skip when /usr/bin/chromium is missing. Servers are real
uvicorn servers of ``create_app`` on 127.0.0.1 (free ports) in background threads. The model is
the bundled ``tiny-arith`` when it has been trained, else a tiny random Llama under that alias.

Assertions on the page are Playwright's ``expect``, which retries until the suite's one waiting
bound (``PATIENCE_MS``, set here for every browser test): a plain ``assert`` reads the page at
once, and an element drawn a moment after the one a test waited for (a Plotly chart, a Gradio
output of a later tick, what ``gmts.js`` draws) fails it on a loaded machine
(tests/test_browser_waits.py keeps them out).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from app.core.config import Settings
from app.live_server import CHROMIUM_ARGS, CHROMIUM_PATH
from app.main import create_app
from gmts_core.demo import DEMO_ALIAS, DEMO_MODEL_DIR
from tests.app.api_helpers import LiveServer, make_settings
from tests.patience import PATIENCE_MS
from tests.tiny_models import save_tiny_model

CHROMIUM = Path(CHROMIUM_PATH)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# every expect(...) in the browser tests waits up to the suite's bound (the default is 5 s)
expect.set_options(timeout=PATIENCE_MS)


def exactly(text: str) -> re.Pattern[str]:
    """``text`` as a pattern for ``expect(...).to_have_text(..., use_inner_text=True)``: the
    whole text, its line breaks included (a string is compared with its whitespace collapsed,
    a pattern as it is)."""
    return re.compile("^" + re.escape(text) + "$")


def demo_model_ready() -> bool:
    return (DEMO_MODEL_DIR / "config.json").is_file()


@pytest.fixture(scope="session")
def browser_model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model root; holds a tiny random Llama used when the demo model is not trained yet."""
    root = tmp_path_factory.mktemp("browser-models")
    if not demo_model_ready():
        save_tiny_model(root / "tiny-random", "llama")
    return root


def ui_settings(root: Path, **overrides: Any) -> Settings:
    """Settings of a UI server: the demo alias (or a stand-in), limits big enough for G=8."""
    aliases = {} if demo_model_ready() else {DEMO_ALIAS: str(root / "tiny-random")}
    values: dict[str, Any] = dict(
        model_aliases=aliases,
        default_model=DEMO_ALIAS,
        ui_enabled=True,
        max_new_tokens=64,
        max_answers=64,
        max_total_tokens=16_384,
        max_body_bytes=200_000,
        max_prompt_chars=2_000,
        max_answer_chars=2_000,
        max_top_alternatives=20,
    )
    values.update(overrides)
    return make_settings(root, **values)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One browser per test file. A sync Playwright keeps its event loop marked as running in
    the worker's main thread while it is open, and files reach a worker in any order
    (tests/file_order.py): a browser left open would break a later file's `anyio.run`."""
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS))
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def _close_pages(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close every page a test left open before its module's server stops: an open page holds
    Gradio's connections, and the server's shutdown waits for them (30 s a server)."""
    yield
    if "chromium" in request.fixturenames:
        for context in list(request.getfixturevalue("chromium").contexts):
            context.close()


@pytest.fixture(scope="module")
def ui_server(browser_model_root: Path) -> Iterator[LiveServer]:
    """A live app (API + UI at /ui) on the local service layer."""
    with LiveServer(create_app(ui_settings(browser_model_root))) as server:
        yield server


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
