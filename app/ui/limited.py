"""Controls whose range ends at one of this server's limits (``GMTS_MAX_*``).

A Gradio slider needs two distinct ends, and a limit can leave a single value
(``GMTS_MAX_SESSION_STEPS=1``): :func:`limit_slider` then shows that value as a fixed number, and
it always starts at a value the server accepts (the default clamped into the range).
"""

from __future__ import annotations

from typing import Any

import gradio as gr


def limit_slider(low: float, high: float, value: float, **kwargs: Any) -> gr.Slider | gr.Number:
    """A slider over ``[low, high]`` (``high``: the server's limit, which wins over ``low``)
    starting at ``value`` clamped into it; a fixed number when only one value is left."""
    low = min(low, high)
    value = min(max(value, low), high)
    if high <= low:  # one value: Gradio refuses a slider whose ends are equal
        kwargs.pop("step", None)
        return gr.Number(value, minimum=low, maximum=high, interactive=False, **kwargs)
    return gr.Slider(low, high, value, **kwargs)
