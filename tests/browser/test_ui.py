"""The explorer UI in a real Chromium: rendering, hover, charts, export, escaping, layout,
the batch view, and the remote-backend mode against a second server on 127.0.0.1."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from app.main import create_app
from app.ui.render import fmt
from gmts_core.demo import DEMO_MODEL_DIR
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import demo_model_ready, ui_settings
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser

EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
LONG_ANSWER = " 7+8=15 carry 1, 4+3+1=8, answer 85; checking: 85-38=47, so 47+38 is 85 indeed"


def open_ui(chromium: Any, url: str, width: int = 1280, height: int = 800) -> Any:
    context = chromium.new_context(
        viewport={"width": width, "height": height}, accept_downloads=True
    )
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(url + "/ui/", wait_until="load")
    page.wait_for_selector("#analyze-btn")
    # the server-rendered first view hands over to Gradio and goes: fill the form after that
    page.wait_for_selector("#gmts-first-view", state="detached")
    return page


def set_number(page: Any, elem_id: str, value: int) -> None:
    """Set a Gradio slider through its number box (opening "More settings" when it is there)."""
    if elem_id == "max-new-tokens":
        page.get_by_text("More settings").click()
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def fill(page: Any, selector: str, text: str, tries: int = 5) -> None:
    """Fill a textbox until it holds ``text``: a fill into a box still mounting (an accordion
    opening) is sometimes reset by the component, so it is checked and repeated."""
    box = page.locator(selector)
    box.wait_for(state="visible")
    for _ in range(tries):
        box.fill(text)
        try:
            page.wait_for_function(
                "([sel, text]) => document.querySelector(sel)?.value === text",
                arg=[selector, text],
                timeout=3_000,
            )
            return
        except PlaywrightTimeoutError:
            continue
    raise AssertionError(f"{selector} did not keep the text filled in {tries} tries")


def run_analysis(page: Any, prompt: str | None = None, answers: list[str] | None = None) -> None:
    """Fill the form, press Analyze and wait until the token view shows the new result."""
    if prompt is not None:
        fill(page, "#prompt textarea", prompt)
    if answers is not None:
        page.get_by_text("Paste answers instead of sampling").click()
        fill(page, "#answers textarea", "\n".join(answers))
    # the form holds what was typed before Analyze is pressed (a fill into a component still
    # mounting was once lost, and the default prompt was sampled instead)
    if prompt is not None:
        expect(page.locator("#prompt textarea")).to_have_value(prompt)
    if answers is not None:
        expect(page.locator("#answers textarea")).to_have_value("\n".join(answers))
    page.click("#analyze-btn")
    page.wait_for_selector("#json-download", state="visible")  # after the new result


def download(page: Any, selector: str) -> Path:
    with page.expect_download() as info:
        page.click(selector)
    return Path(info.value.path())


def result_json(page: Any) -> dict[str, Any]:
    return json.loads(download(page, "#json-download").read_text(encoding="utf-8"))


def all_tokens(group: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for a in group["answers"] for t in a["tokens"]]


def test_explore_sampled_group(chromium: Any, ui_server: LiveServer, artifacts: Path) -> None:
    page = open_ui(chromium, ui_server.url)
    set_number(page, "max-new-tokens", 40)
    run_analysis(page)  # the default example prompt, sampled with G = 8
    body = result_json(page)
    tokens = all_tokens(body)
    k = body["summary"]["k"]
    view = page.locator("#token-view")
    assert len(tokens) == body["summary"]["num_tokens"]
    expect(view.locator(".tok")).to_have_count(len(tokens))
    expect(view.locator(".tok.sel-a")).to_have_count(k)  # entropy
    expect(view.locator(".tok.sel-b")).to_have_count(k)  # gmts
    for ans in body["answers"]:
        expect(view.locator(f'.tok[data-answer="{ans["index"]}"]')).to_have_count(ans["length"])

    # hover: the tooltip shows this token's numbers
    span = view.locator(".tok").nth(min(4, len(tokens) - 1))
    answer, pos = int(span.get_attribute("data-answer")), int(span.get_attribute("data-pos"))
    tok = body["answers"][answer]["tokens"][pos]
    span.hover()
    tip = page.locator("#gmts-tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert f"position {pos}" in text and f"id {tok['id']}" in text
    assert f"entropy {fmt(tok['entropy'], 3)}" in text
    assert f"grad_proxy {fmt(tok['grad_proxy'])}" in text
    assert "top alternatives" in text

    # the scatter chart: a plotly div with at least one point per token
    page.wait_for_selector("#scatter-plot .js-plotly-plot .scatterlayer .point")
    expect(page.locator("#scatter-plot .scatterlayer .point").nth(len(tokens) - 1)).to_be_attached()

    # CSV export: one row per token
    with download(page, "#csv-download").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(tokens)

    page.screenshot(path=str(artifacts / "ui-explore.png"), full_page=True)
    page.get_by_role("tab", name="Learn").click()
    learn = page.locator("#learn-view")
    learn.wait_for(state="visible")
    expect(learn).to_contain_text(re.compile("scaled by|no gradient"), use_inner_text=True)
    page.screenshot(path=str(artifacts / "ui-learn.png"), full_page=True)
    page.context.close()


def test_markup_in_prompt_and_answers_renders_as_text(chromium: Any, ui_server: LiveServer) -> None:
    page = open_ui(chromium, ui_server.url)
    run_analysis(page, prompt=f"Q: 47+38=?{EVIL}\nA:", answers=[f" answer 85 {EVIL}", " 75"])
    # the new result's view first (the markup shown as text), then nothing of it ran or rendered
    expect(page.locator("#token-view .prompt-text")).to_contain_text(
        "<script>", use_inner_text=True
    )
    expect(page.locator("#token-view .answer").first).to_contain_text("<img", use_inner_text=True)
    assert page.evaluate("window.__pwned") is None
    expect(page.locator("#token-view img")).to_have_count(0, timeout=1)
    expect(page.locator("#token-view script")).to_have_count(0, timeout=1)
    page.locator("#token-view .tok").first.hover()
    assert page.evaluate("window.__pwned") is None
    page.context.close()


def test_narrow_viewport_wraps_without_page_scroll(
    chromium: Any, ui_server: LiveServer, artifacts: Path
) -> None:
    page = open_ui(chromium, ui_server.url, width=390, height=844)
    run_analysis(page, answers=[LONG_ANSWER, " answer 75"])
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1, width
    tops = page.evaluate(
        "Array.from(document.querySelectorAll('#token-view .tok[data-answer=\"0\"]'))"
        ".map(e => Math.round(e.getBoundingClientRect().top))"
    )
    assert len(set(tops)) > 1, "a long answer should wrap onto several lines"
    page.screenshot(path=str(artifacts / "ui-explore-390px.png"), full_page=True)
    page.context.close()


def test_demo_batch_and_drill_down(chromium: Any, ui_server: LiveServer, artifacts: Path) -> None:
    page = open_ui(chromium, ui_server.url)
    page.get_by_text("Batch of prompts (selection across groups)").click()
    set_number(page, "group-size", 4)  # 4 prompts x 4 answers keep the test quick on 2 cores
    set_number(page, "max-new-tokens", 24)
    page.click("#demo-batch-btn")
    page.wait_for_function(
        "(document.querySelector('#batch-text textarea')?.value ?? '').split('---').length === 4"
    )
    page.click("#analyze-batch-btn")
    page.wait_for_selector("#batch-box", state="visible")
    page.wait_for_selector("#json-download", state="visible")
    body = result_json(page)
    assert len(body["groups"]) == 4
    expect(page.locator("#batch-overview tbody tr")).to_have_count(4)  # one row per group
    page.wait_for_selector("#budget-plot .js-plotly-plot .barlayer .point")

    page.locator("#group-select input").click()
    page.get_by_role("option", name=re.compile(r"^group 2:")).click()
    page.wait_for_selector('#token-view .gmts-view[data-group="2"]')
    group = body["groups"][2]
    view = page.locator("#token-view")
    summary = group["summary"]
    expect(view.locator(".tok")).to_have_count(summary["num_tokens"])
    expect(view.locator(".tok.sel-b")).to_have_count(summary["selected_count"]["gmts"])
    expect(view.locator(".tok.sel-a")).to_have_count(summary["selected_count"]["entropy"])
    page.screenshot(path=str(artifacts / "ui-batch.png"), full_page=True)
    page.context.close()


def test_remote_backend_mode(chromium: Any, browser_model_root: Path) -> None:
    """A UI server with api_url calls a second server's API; its own registry lacks the model."""
    source = DEMO_MODEL_DIR if demo_model_ready() else browser_model_root / "tiny-random"
    backend_settings = ui_settings(
        browser_model_root,
        ui_enabled=False,
        model_aliases={"remote-only": str(source)},
        default_model="remote-only",
    )
    with LiveServer(create_app(backend_settings)) as backend:
        front_settings = ui_settings(
            browser_model_root, api_url=backend.url, model_aliases={}, default_model="absent"
        )
        with LiveServer(create_app(front_settings)) as front:
            page = open_ui(chromium, front.url)
            expect(page.locator("body")).to_contain_text(
                f"remote {backend.url}", use_inner_text=True
            )
            run_analysis(page, answers=[" answer 85", " answer 75", " 85"])
            body = result_json(page)
            assert body["model"] == backend_settings.default_model
            n = sum(len(a["tokens"]) for a in body["answers"])
            expect(page.locator("#token-view .tok")).to_have_count(n)
            page.context.close()


def test_user_error_shows_the_library_message(chromium: Any, ui_server: LiveServer) -> None:
    page = open_ui(chromium, ui_server.url)
    page.fill("#reference textarea, #reference input", "")
    page.click("#analyze-btn")
    page.get_by_text("needs a reference answer").first.wait_for(state="visible")
    page.context.close()
