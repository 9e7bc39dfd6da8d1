"""Controls whose range ends at a limit: one of this server's (``GMTS_MAX_*``), or the learning
rates the demo model takes (the Train and Compare tabs).

A Gradio slider needs two distinct ends, and a limit can leave a single value
(``GMTS_MAX_SESSION_STEPS=1``): :func:`limit_slider` then shows that value as a fixed number, and
it always starts at a value the server accepts (the default clamped into the range).
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from app.ui import numbers


def limit_slider(low: float, high: float, value: float, **kwargs: Any) -> gr.Slider | gr.Number:
    """A slider over ``[low, high]`` (``high``: the server's limit, which wins over ``low``)
    starting at ``value`` clamped into it; a fixed number when only one value is left."""
    low = min(low, high)
    value = min(max(value, low), high)
    if high <= low:  # one value: Gradio refuses a slider whose ends are equal
        kwargs.pop("step", None)
        return numbers.number(value, minimum=low, maximum=high, interactive=False, **kwargs)
    return numbers.slider(low, high, value, **kwargs)


# below: too slow to see in a run; above: held-out accuracy falls in a run of the defaults
# (lr 3e-4: 0.475 -> 0.405 in 25 steps of 16 prompts x 2 updates; 5e-4: -> 0.225, a collapse;
# 1e-3 -> ~0). The learning-rate controls stop at LR_CONTROL_MAX, the highest rate measured not
# to collapse a run (docs/live-rl.md has the measurements).
SANE_LR = (1e-6, 2e-4)
LR_CONTROL_MAX = 3e-4


def lr_warning(learning_rate: float) -> str | None:
    """A plain sentence when the learning rate is outside the range that works on this demo."""
    lo, hi = SANE_LR
    if learning_rate > hi:
        return (
            f"Learning rate {learning_rate:g} is above {hi:g}: on the demo model held-out "
            "accuracy falls at such rates (1e-3 wrecks it within a few steps). Try 1.5e-4."
        )
    if 0 <= learning_rate < lo:
        return (
            f"Learning rate {learning_rate:g} is below {lo:g}: the model will barely move in a "
            "run. Try 1.5e-4."
        )
    return None
