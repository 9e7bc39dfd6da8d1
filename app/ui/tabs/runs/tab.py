"""The Runs tab's wiring: the run picker, charts over steps, the steps table and a step's groups."""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from app.services.errors import GMTSError
from app.ui.context import Tab, UIContext, call
from app.ui.render import Json
from app.ui.tabs.runs.view import (
    overview_figures,
    run_choices,
    step_html,
    step_summary,
    steps_table,
)

logger = logging.getLogger(__name__)


def build_runs_tab(ctx: UIContext) -> None:
    """Runs: run picker, charts over steps, the steps table, a step's groups."""
    gr.Markdown(
        "Training runs the server can read (TRL `completions/`, verl, ROLL, AReaL, GMTS JSONL, "
        "GMTSGRPOTrainer token logs) under `GMTS_RUN_ROOTS`. Click a step in the table."
    )
    models, default_model = ctx.backend.models()
    try:
        choices = run_choices(ctx.backend.runs())
    except GMTSError as exc:  # a remote backend may be down: the Refresh button retries
        logger.warning("cannot list runs: %s", exc)
        choices = []
    with gr.Row():
        run = gr.Dropdown(choices, value=None, label="Run", elem_id="run-pick", scale=3)
        refresh = gr.Button("Refresh runs", elem_id="run-refresh", scale=1)
        model = gr.Dropdown(
            models, value=default_model, label="Model", allow_custom_value=True, scale=2
        )
        ratio = gr.Slider(0.05, 1.0, 0.2, step=0.05, label="Selection ratio", scale=2)
    with gr.Row():
        reward_plot = gr.Plot(label="Reward", elem_id="run-reward-plot")
        cover_plot = gr.Plot(label="Coverage", elem_id="run-coverage-plot")
    table = gr.Dataframe(interactive=False, elem_id="run-steps", label="Steps (click one)")
    with gr.Row():
        prev_btn = gr.Button("◀ previous step", elem_id="run-prev")
        next_btn = gr.Button("next step ▶", elem_id="run-next")
    summary = gr.Markdown(elem_id="run-step-summary")
    view_html = gr.HTML(step_html(None), elem_id="run-step-view")
    current = gr.State(None)  # the step view shown (the API's JSON body)

    def list_runs() -> Any:
        choices = run_choices(call(ctx.backend.runs))
        return gr.update(choices=choices, value=None)

    def load_run(run_id: str | None) -> tuple[Any, Any, Any]:
        if not run_id:
            return None, None, None
        overview = call(lambda: ctx.backend.run_overview(run_id))
        reward, cover = overview_figures(overview)
        return reward, cover, steps_table(overview)

    def show(run_id: str | None, step: int | None, model_name: str, r: float) -> tuple:
        if not run_id or step is None:
            return None, step_summary(None), step_html(None), gr.update()
        params = {"model": model_name, "ratio": r, "methods": "entropy,gmts"}
        view = call(lambda: ctx.backend.run_step(run_id, int(step), params))
        cover = overview_figures(call(lambda: ctx.backend.run_overview(run_id)))[1]
        return view, step_summary(view), step_html(view), cover

    def pick(run_id: str | None, model_name: str, r: float, evt: gr.SelectData) -> tuple:
        row = evt.row_value or []
        return show(run_id, int(row[0]) if row else None, model_name, r)

    def move(view: Json | None, key: str, run_id: str | None, model_name: str, r: float) -> tuple:
        target = view.get(key) if view else None
        if target is None:
            return view, step_summary(view), step_html(view), gr.update()
        return show(run_id, target, model_name, r)

    outputs = [current, summary, view_html, cover_plot]
    refresh.click(list_runs, None, [run])
    run.change(load_run, [run], [reward_plot, cover_plot, table])
    table.select(pick, [run, model, ratio], outputs)
    prev_btn.click(lambda v, *a: move(v, "previous", *a), [current, run, model, ratio], outputs)
    next_btn.click(lambda v, *a: move(v, "next", *a), [current, run, model, ratio], outputs)


TAB = Tab("Runs", "runs", build_runs_tab)
