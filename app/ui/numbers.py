"""Every numeric control of the UI, under one rule for a value outside its range: it is clamped
to the nearest end, and the page says so next to the value ("Learning rate: 1 is above the
maximum 0.0003; using 0.0003.", ``static/gmts.js``). Never a refusal toast with Gradio's own
words, never a traceback in the server log.

:func:`slider` and :func:`number` make Gradio's controls with a server side that clamps instead
of raising (a value can still arrive out of range: typed and sent before the page clamps it, or
from an API client); not subclasses, so Gradio writes no stub file beside this module.
``tests/app/ui/test_ui_numbers.py`` finds every numeric control of the built UI and checks the
rule on each, so a new control inherits the check.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import gradio as gr

C = TypeVar("C", gr.Slider, gr.Number)


def clamped(value: float | None, low: float | None, high: float | None) -> float | None:
    """``value`` moved into ``[low, high]`` (either end may be missing); None stays None, and a
    NaN becomes the low end (else the high end, else 0)."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return low if low is not None else (high if high is not None else 0.0)
    if low is not None and value < low:
        return low
    if high is not None and value > high:
        return high
    return value


def _clamping(component: C) -> C:
    """``component`` (a slider or a number box) whose server side clamps a value outside
    ``[minimum, maximum]`` instead of refusing it with Gradio's own words."""
    refuse = component.preprocess

    def preprocess(payload: Any) -> Any:
        value = clamped(payload, component.minimum, component.maximum)
        if value is None and isinstance(component, gr.Slider):
            value = component.minimum
        return refuse(value)

    component.preprocess = preprocess  # type: ignore[method-assign]
    component.clamps = True  # type: ignore[attr-defined]  # what the test of every control reads
    return component


def slider(*args: Any, **kwargs: Any) -> gr.Slider:
    """Gradio's slider whose server side clamps a value outside its range."""
    return _clamping(gr.Slider(*args, **kwargs))


def number(*args: Any, **kwargs: Any) -> gr.Number:
    """Gradio's number box whose server side clamps a value outside its range."""
    return _clamping(gr.Number(*args, **kwargs))
