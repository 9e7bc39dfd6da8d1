"""The example group the page opens on (static/example-group.json) matches the bundled model.

If this fails after the demo model was retrained, regenerate it:
``python -m app.ui.tabs.explore.example``.
"""

from __future__ import annotations

import re

import pytest

from app.core.config import Settings
from app.services.container import build_services
from app.ui.client import LocalBackend
from app.ui.tabs.explore import example
from app.ui.tabs.explore import tab as explore_tab
from tests.browser.conftest import demo_model_ready


@pytest.mark.skipif(not demo_model_ready(), reason="the bundled demo model is not trained")
def test_shipped_example_is_what_analyze_gives_on_the_default_form() -> None:
    shipped = example.load_example()
    assert shipped is not None
    fresh = example.compute_example(LocalBackend(build_services(Settings())))
    assert shipped["prompt"] == fresh["prompt"] == example.example_form().prompt
    assert [a["text"] for a in shipped["answers"]] == [a["text"] for a in fresh["answers"]]
    assert [a["reward"] for a in shipped["answers"]] == [a["reward"] for a in fresh["answers"]]
    for old, new in zip(shipped["answers"], fresh["answers"], strict=True):
        for t_old, t_new in zip(old["tokens"], new["tokens"], strict=True):
            assert t_old["entropy"] == pytest.approx(t_new["entropy"], abs=1e-4)
            for m in ("entropy", "gmts"):
                assert t_old["selected"][m] == t_new["selected"][m]


def test_a_missing_or_broken_example_means_an_empty_first_screen(tmp_path) -> None:
    assert example.load_example(tmp_path / "absent.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert example.load_example(bad) is None


def test_first_screen_payload_stays_compact() -> None:
    """The example's token view and charts travel in the page's Gradio config and the browser
    parses all of them before the first highlighted token shows: keep their bytes per token in
    check (the full tooltips, detail JSON and 17-digit floats were ~1.2 kB and ~400 B a token)."""
    shipped = example.load_example()
    assert shipped is not None
    n = sum(len(a["tokens"]) for a in shipped["answers"])
    values = explore_tab.initial_values(shipped)
    assert len(re.findall(r'class="tok[ "]', values[1])) == n
    assert len(values[1].encode()) / n < 800
    figures = values[3:7]  # scatter, distributions, positions, advantages
    assert all(hasattr(f, "to_json") for f in figures)
    assert sum(len(f.to_json()) for f in figures) / n < 350
