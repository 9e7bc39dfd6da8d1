"""One rule for a number outside a control's range, on every numeric control of the built UI
(found in the Blocks, so a control added later is checked too): its server side clamps the value
to the nearest end, never refusing with Gradio's words or a traceback; the page clamps it first
and says so (``static/gmts.js``, seen in ``tests/browser/test_status.py``)."""

from __future__ import annotations

import gradio as gr
import pytest

from app.services.container import build_services
from app.ui import numbers
from app.ui.blocks import build_blocks
from app.ui.local_backend import LocalBackend
from tests.app.api_helpers import make_settings


@pytest.fixture(scope="module")
def controls(tmp_path_factory: pytest.TempPathFactory) -> list[gr.components.Component]:
    settings = make_settings(tmp_path_factory.mktemp("ui-numbers"), ui_enabled=True)
    blocks = build_blocks(LocalBackend(build_services(settings)), settings)
    return [b for b in blocks.blocks.values() if isinstance(b, gr.Slider | gr.Number)]


def test_the_ui_has_numeric_controls_and_each_clamps(controls: list) -> None:
    assert len(controls) >= 20  # every tab's sliders and boxes (37 when written)
    for c in controls:
        name = c.label or c.elem_id
        assert getattr(c, "clamps", False), f"{name}: make it with app.ui.numbers"
        low, high = c.minimum, c.maximum
        assert low is not None, f"{name}: a numeric control needs a minimum"
        if high is not None:
            assert c.preprocess(high * 10 + 7) == pytest.approx(high), name
        assert c.preprocess(low - 10 * (abs(low) + 1)) == pytest.approx(low), name
        assert c.preprocess(float("nan")) == pytest.approx(low), name
        inside = low if high is None else (low + high) / 2
        want = gr.Number.round_to_precision(inside, getattr(c, "precision", None))
        assert c.preprocess(inside) == pytest.approx(want), name


@pytest.mark.parametrize(
    ("value", "low", "high", "out"),
    [
        (5, 0, 3, 3),
        (-1, 0, 3, 0),
        (2, 0, 3, 2),
        (9, None, 3, 3),
        (-9, 0, None, 0),
        (None, 0, 1, None),
    ],
)
def test_clamped(value: float | None, low: float | None, high: float | None, out: float) -> None:
    assert numbers.clamped(value, low, high) == out
