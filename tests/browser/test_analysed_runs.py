"""Analysed runs in the Runs tab, in a real Chromium: open one, filter across it, open an
answer's tokens (ranks labelled with their pool), watch a growing run add a step, and download
the report and open it with the network off."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import expect

from app.main import create_app
from gmts_core.run_dataset.schema import write_manifest
from gmts_core.run_dataset.synthetic import synthetic_step
from gmts_core.run_dataset.writer import write_step
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import ui_settings
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("analysed-root")
    run = root / "big-run"
    write_manifest(run, ("entropy", "gmts"), {})
    rng = np.random.default_rng(11)
    for step in (1, 2, 3):
        write_step(run, synthetic_step(step, 20, 8, rng))
    return run


@pytest.fixture(scope="module")
def server(browser_model_root: Path, dataset: Path) -> Iterator[LiveServer]:
    settings = ui_settings(browser_model_root, run_roots=[dataset.parent])
    with LiveServer(create_app(settings)) as live:
        yield live


def test_browse_filter_grow_and_download_an_analysed_run(
    chromium: Any, server: LiveServer, dataset: Path, tmp_path: Path
) -> None:
    context = chromium.new_context(viewport={"width": 1366, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(server.url + "/ui/", wait_until="load")
    page.get_by_role("tab", name="Runs").click()
    page.locator("#analysed-pick input").click()
    page.get_by_role("option", name="big-run").click()
    page.get_by_text(re.compile(r"3 steps analysed \(steps 1–3\)")).wait_for()
    # the chart is drawn after the label (another output, drawn by Plotly): waited for, once
    expect(page.locator("#analysed-reward-plot .js-plotly-plot")).to_have_count(1)

    group_row = page.locator("#analysed-groups .virtual-row").nth(2)
    group_row.wait_for()  # step 1's groups, opened with the run
    group_row.locator("[role=gridcell]").first.click()
    page.wait_for_function(
        "document.querySelectorAll('#analysed-answers .virtual-row').length === 8"
    )  # the group's 8 answers
    expect(page.locator("#analysed-answers .virtual-row [role=gridcell]").nth(1)).to_have_text(
        "2", use_inner_text=True
    )

    page.locator("#analysed-contains textarea, #analysed-contains input").first.fill("right")
    page.click("#analysed-find")
    page.get_by_text(re.compile(r"[\d,]+ answers match")).wait_for()
    first = page.locator("#analysed-results .virtual-row").first
    first.wait_for()
    expect(first).to_contain_text("right", use_inner_text=True)
    first.locator("[role=gridcell]").first.click()
    token = page.locator("#analysed-tokens .tok").first
    token.wait_for()
    title = token.get_attribute("title") or ""
    match = re.search(r"entropy .* rank #([\d,]+) of ([\d,]+) in the step", title)
    assert match, title
    rank, pool = (int(g.replace(",", "")) for g in match.groups())
    assert 1 <= rank <= pool  # a rank within the pool it names

    write_step(dataset, synthetic_step(4, 20, 8, np.random.default_rng(12)))  # the run grows
    page.get_by_text(re.compile(r"4 steps analysed \(steps 1–4\)")).wait_for(timeout=PATIENCE_MS)

    with page.expect_download() as info:
        page.click("#analysed-download")
    saved = tmp_path / "report.html"
    info.value.save_as(saved)
    offline = chromium.new_context()
    offline.route(
        "**/*",
        lambda route: (
            route.abort() if not route.request.url.startswith("file:") else route.continue_()
        ),
    )
    report = offline.new_page()
    report.goto(saved.as_uri(), wait_until="load")
    report.wait_for_selector(".js-plotly-plot .main-svg")
    expect(report.locator("body")).to_contain_text("steps analysed", use_inner_text=True)
    expect(report.locator("body")).to_contain_text("gmts keeps", use_inner_text=True)
    expect(report.locator(".tok").first).to_be_attached()  # the answer that was shown
    offline.close()
    context.close()
