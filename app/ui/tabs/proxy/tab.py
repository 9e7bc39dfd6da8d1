"""The Proxy check tab's wiring: check the group Explore shows (its drill-down group) against
exact per-token gradients.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from app.services.responses import as_json
from app.ui import numbers
from app.ui.context import Tab, UIContext, call
from app.ui.render import Json
from app.ui.tabs.proxy.view import gradcheck_request, proxy_view

EXPLAIN = (
    "### How good is the proxy?\n"
    "For the group shown in Explore, the tool computes each answer token's **exact** "
    "full-parameter gradient norm ‖∂(w·A·log π(y))/∂θ‖ (one backward per token: small models "
    "only: a few seconds for a group of the demo model on one CPU thread) and compares every "
    "method's score with it. *true norm kept*: share of the sum of true norms in the selection; "
    "*cosine to full gradient*: does training on the selection keep the update's direction? "
    "Answers are re-tokenized from their text; rewards are taken as given numbers."
)


def build_proxy_tab(ctx: UIContext) -> None:
    """The proxy check of Explore's current group (the drill-down group of a batch)."""
    gr.Markdown(EXPLAIN)
    with gr.Row():
        max_tokens = numbers.slider(
            16, 1024, 256, step=16, label="Token limit", elem_id="proxy-max"
        )
        precision = gr.Radio(["float32", "float64"], value="float32", label="Precision")
        run_btn = gr.Button("Check the current group", variant="primary", elem_id="proxy-run-btn")
    summary = gr.Markdown(elem_id="proxy-summary")
    gr.Markdown("#### Fidelity")
    table = gr.HTML(elem_id="proxy-table")  # a card per method on a phone (fidelity_html)
    scatter = gr.Plot(label="Score vs true gradient norm", elem_id="proxy-scatter")
    group = ctx.group if ctx.group is not None else gr.State(0)  # Explore's drill-down

    def run(result: Json | None, gi: Any, limit: int, prec: str) -> list[Any]:
        body = call(lambda: ctx.backend.gradcheck(gradcheck_request(result, gi, limit, prec)))
        return proxy_view(as_json(body))  # the view draws the body as the API sends it

    run_btn.click(run, [ctx.result, group, max_tokens, precision], [summary, table, scatter])


TAB = Tab("Proxy check", "proxy-check", build_proxy_tab)
