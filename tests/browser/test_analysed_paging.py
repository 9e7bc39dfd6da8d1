"""Everything of an analysed run is reachable in the browser, at 1366 and 390 px: a step's
groups page by page (groups 401-512 of 512), and an answer of 4,096 tokens 1,000 at a time
with its place said ("tokens 4,001–4,096 of 4,096")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from playwright.sync_api import expect

from app.main import create_app
from gmts_core.run_dataset.schema import step_file, write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import write_step
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import ui_settings
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("paging-root") / "long-run"
    write_manifest(run, ("entropy", "gmts"), {})
    rng = np.random.default_rng(5)
    write_step(run, synthetic_step(1, 512, 2, rng, median_length=6))
    write_step(run, synthetic_step(2, 1, 8, rng, median_length=4096, max_length=4096))
    lengths = pq.read_table(step_file(run, "answers", 2)).column("length").to_pylist()
    assert 4096 in lengths  # a long answer (the length limit) to page through
    return run


@pytest.fixture(scope="module")
def server(browser_model_root: Path, dataset: Path) -> Iterator[LiveServer]:
    settings = ui_settings(browser_model_root, run_roots=[dataset.parent])
    with LiveServer(create_app(settings)) as live:
        yield live


def _cell(page: Any, table: str, row: int, col: int) -> Any:
    """A grid cell, for an auto-waiting ``expect`` (its text is compared stripped)."""
    return page.locator(f"#{table} .virtual-row").nth(row).locator("[role=gridcell]").nth(col)


@pytest.mark.parametrize("width", [1366, 390])
def test_every_group_and_every_token_is_reachable(
    chromium: Any, server: LiveServer, width: int
) -> None:
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(server.url + "/ui/", wait_until="load")
    page.get_by_role("tab", name="Runs").click()
    page.locator("#analysed-pick input").click()
    page.get_by_role("option", name="long-run").click()
    note = page.locator("#analysed-groups-note")
    page.get_by_text("groups 1–200 of 512").wait_for()
    for shown in ("groups 201–400 of 512", "groups 401–512 of 512"):
        page.click("#analysed-groups-next")
        page.get_by_text(shown).wait_for()
    page.click("#analysed-groups-next")  # past the last page: it stays
    page.get_by_text("groups 401–512 of 512").wait_for()
    expect(_cell(page, "analysed-groups", 0, 0)).to_have_text("400", use_inner_text=True)
    page.locator("#analysed-groups .virtual-row").first.locator("[role=gridcell]").first.click()
    page.wait_for_function(
        "[...document.querySelectorAll('#analysed-answers .virtual-row')].length === 2"
    )
    # a group past the first 200
    expect(_cell(page, "analysed-answers", 0, 1)).to_have_text("400", use_inner_text=True)
    expect(note).to_contain_text("groups 401–512", use_inner_text=True)

    page.locator("#analysed-step input").click()
    page.get_by_role("option", name="2", exact=True).click()
    page.get_by_text("groups 1–1 of 1").wait_for()
    page.locator("#analysed-groups .virtual-row").first.locator("[role=gridcell]").first.click()
    long_row = page.locator("#analysed-answers .virtual-row", has_text="4096").first
    long_row.wait_for()
    long_row.locator("[role=gridcell]").first.click()
    tokens = page.locator("#analysed-tokens")
    page.get_by_text(re.compile("tokens 1–1,000 of 4,096")).wait_for()
    expect(tokens.locator(".tok")).to_have_count(1000)
    marks = page.evaluate(
        """() => [...document.querySelectorAll('#analysed-tokens .tok')].map(t =>
            [(t.style.boxShadow.match(/inset/g) || []).length, t.title])"""
    )
    assert max(n for n, _ in marks) <= 2  # two marks at most: the text stays legible
    assert any(n == 2 for n, _ in marks) and any(n == 1 for n, _ in marks)
    title = marks[0][1]
    assert re.search(r"probability [\d.]+%", title) and "selected by:" in title, title
    assert re.search(r"rank #[\d,]+ of [\d,]+ in the step", title), title
    for first in (1001, 2001, 3001, 4001):
        page.click("#analysed-tokens-next")
        page.get_by_text(re.compile(f"tokens {first:,}–")).wait_for()
    page.get_by_text("tokens 4,001–4,096 of 4,096").wait_for()
    expect(tokens.locator(".tok")).to_have_count(96)
    page.click("#analysed-tokens-prev")
    page.get_by_text("tokens 3,001–4,000 of 4,096").wait_for()
    context.close()
