"""One colour per method on every tab, read back from what Chromium rendered.

The token marks' CSS colours and the legend symbols of the plotly charts (their SVG paths'
stroke or fill) on Explore, Train and Compare must give each method one colour, the one in
``app.palette``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from app.palette import method_color
from gmts_core.config import RLConfig
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.experiments.compare import CompareConfig, run_compare
from gmts_core.model.loading import load_model
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import demo_model_ready
from tests.patience import PATIENCE_MS

pytestmark = pytest.mark.browser

# legend entry text -> the colour of its symbol (a line's stroke, an open marker's stroke, or a
# filled marker's fill), as rgb(...) strings
LEGEND_JS = """(sel) => {
  const out = {};
  document.querySelectorAll(sel + ' .legend .traces').forEach(tr => {
    const name = tr.querySelector('.legendtext').textContent;
    const paths = '.legendsymbols path, .legendlines path, .legendpoints path';
    for (const p of tr.querySelectorAll(paths)) {
      const stroke = p.style.stroke, fill = p.style.fill;
      const c = (stroke && stroke !== 'none' && !/255, 255, 255/.test(stroke)) ? stroke
              : (fill && fill !== 'none' && !/rgba\\(0, 0, 0, 0\\)/.test(fill)) ? fill : null;
      if (c) { out[name] = c.replace(/\\s+/g, ''); break; }
    }
  });
  return out;
}"""


def rgb(hex_color: str) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r},{g},{b})"


ENTROPY, GMTS = rgb(method_color("entropy")), rgb(method_color("gmts"))


def set_number(page: Any, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def legend(page: Any, selector: str) -> dict[str, str]:
    page.wait_for_selector(f"{selector} .legend .traces")
    return dict(page.evaluate(LEGEND_JS, selector))


@pytest.fixture(scope="module")
def compare_file(tmp_path_factory: pytest.TempPathFactory, browser_model_root: Path) -> Path:
    """A real, tiny compare run (entropy and gmts), saved as `gmts compare --out` writes it."""
    source = DEMO_MODEL_DIR if demo_model_ready() else browser_model_root / "tiny-random"
    rl = dataclasses.replace(RLConfig(), group_size=2, prompts_per_step=1, max_new_tokens=8)
    config = CompareConfig(
        methods=("entropy", "gmts"), steps=1, seeds=1, eval_every=1, eval_problems=2, rl=rl
    )
    result = run_compare(load_model(source, name="tiny-arith"), config)
    path = tmp_path_factory.mktemp("compare") / "compare.json"
    path.write_text(json.dumps(result.to_dict()), encoding="utf-8")
    return path


def test_method_colours_are_the_same_on_every_tab(
    chromium: Any, ui_server: LiveServer, compare_file: Path
) -> None:
    context = chromium.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(ui_server.url + "/ui/", wait_until="load")

    # Explore (the default example's group): token marks and the scatter's selection rings
    page.wait_for_selector("#token-view .tok.mark-b")
    marks = page.evaluate(
        """() => {
          const c = (sel, side) => getComputedStyle(document.querySelector(sel))[side];
          return [c('#token-view .tok.sel-a', 'borderBottomColor'),
                  c('#token-view .tok.sel-b', 'borderTopColor')];
        }"""
    )
    assert [m.replace(" ", "") for m in marks] == [ENTROPY, GMTS]
    scatter = legend(page, "#scatter-plot")
    assert scatter["selected by entropy"] == ENTROPY and scatter["selected by gmts"] == GMTS
    dist = legend(page, "#distributions-plot")
    assert dist["selected by entropy"] == ENTROPY and dist["selected by gmts"] == GMTS

    # Train: one small step; the wasted-share lines and the current run's reward line
    page.get_by_role("tab", name="Train").click()
    small = {"train-g": 4, "train-prompts": 1, "train-max-new": 24, "train-eval": 10}
    for elem_id, value in {**small, "train-steps": 1}.items():
        set_number(page, elem_id, value)
    page.click("#train-run-btn")
    page.wait_for_selector("#train-batch .tok.mark-a")  # drawn once the run (and eval) ends
    wasted = legend(page, "#train-wasted-plot")
    assert wasted["entropy"] == ENTROPY and wasted["gmts"] == GMTS
    reward = legend(page, "#train-reward-plot")
    assert reward["training reward, gmts (5-step average)"] == GMTS
    trained = page.evaluate(
        "() => getComputedStyle(document.querySelector('#train-batch .tok.mark-a'))"
        ".borderBottomColor"
    )
    assert trained.replace(" ", "") == GMTS  # the last batch marks gmts's tokens in its colour

    # Compare: a saved run loaded back; one line per method
    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-upload input[type=file]").set_input_files(str(compare_file))
    page.wait_for_selector("#compare-json", state="visible")
    for plot in ("accuracy", "reward"):
        lines = legend(page, f"#compare-{plot}-plot")
        assert lines == {"entropy": ENTROPY, "gmts": GMTS}, plot
    context.close()
