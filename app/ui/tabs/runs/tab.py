"""The Runs tab's wiring: the run picker, charts over steps, the steps table and a step's groups."""

from __future__ import annotations

import logging
from typing import Any

import gradio as gr
from gradio.context import Context

from app.schemas.runs import RunsResponse
from app.services.catalog import ANALYSIS_DEFAULTS, analysis_knob
from app.ui.context import Tab, UIContext, call
from app.ui.downloads import write_download
from app.ui.numbers import slider
from app.ui.render import COLOR_BY, Json
from app.ui.tabs.runs.analysed import build_analysed_section
from app.ui.tabs.runs.view import (
    metrics_figures,
    metrics_status,
    overview_figures,
    report_page,
    run_choices,
    step_differences,
    step_html,
    step_summary,
    steps_table,
    trainer_metrics_figure,
    trainer_metrics_note,
    unreadable_note,
)
from gmts_core.errors import GMTSError
from gmts_core.knobs import BUDGET_OVER

logger = logging.getLogger(__name__)
METRICS_POLL_S = 2.0  # how often an open run's background metrics are asked for
# a step's per-token numbers: the model's forward pass, or the dump's own (no model)
NUMBER_CHOICES = [
    ("recomputed by the model (the dump's beside them)", "recomputed"),
    ("logged by the trainer's dump (no model)", "logged"),
]
STEP_VIEW_QUEUE = "runs-step-view"  # the one queue of the events that show a step
CHARTS_QUEUE = "runs-charts"  # the one queue of the events that draw a run's metrics charts


def build_runs_tab(ctx: UIContext) -> None:
    """Runs: run picker, charts over steps (computed in the background), the steps table, a
    step's summary, why its two methods differ, and its groups' tokens."""
    gr.Markdown(
        "Training runs the server can read (TRL `completions/`, verl, ROLL, AReaL, miles' "
        "Parquet mirror, GMTS JSONL, GMTSGRPOTrainer token logs) under `GMTS_RUN_ROOTS`. "
        "Opening a run shows its first step, charts its metrics as the server computes them "
        "and what the trainer itself logged (TRL's `trainer_state.json`, verl's file logger); "
        "click a step in the table."
    )
    models, default_model = ctx.backend.models()
    try:
        listing = ctx.backend.runs()
    except GMTSError as exc:  # a remote backend may be down: the Refresh button retries
        logger.warning("cannot list runs: %s", exc)
        listing = RunsResponse(runs=[], formats=[])
    with gr.Row():
        run = gr.Dropdown(
            run_choices(listing), value=None, label="Run", elem_id="run-pick", scale=3
        )
        refresh = gr.Button("Refresh runs", elem_id="run-refresh", scale=1)
        model = gr.Dropdown(
            models, value=default_model, label="Model", allow_custom_value=True, scale=2
        )
        ratio = slider(
            0.05, 1.0, ANALYSIS_DEFAULTS.ratio, step=0.05, label="Selection ratio", scale=2
        )
    with gr.Row():
        numbers = gr.Radio(
            NUMBER_CHOICES, value="recomputed", label="Per-token numbers", elem_id="run-numbers"
        )
        colour = gr.Radio(
            [(spec.label, key) for key, spec in COLOR_BY.items()],
            value="entropy",
            label="Shade tokens by",
            elem_id="run-colour",
        )
        budget = gr.Radio(
            list(BUDGET_OVER),
            value=ANALYSIS_DEFAULTS.budget_over,
            label="Budget counts",
            info=analysis_knob("budget_over")[0],
            elem_id="run-budget",
        )
    bad_runs = gr.Markdown(unreadable_note(listing), elem_id="run-unreadable")
    status = gr.Markdown(elem_id="run-metrics-status")
    with gr.Row():
        reward_plot = gr.Plot(label="Reward", elem_id="run-reward-plot")
        cover_plot = gr.Plot(label="Coverage", elem_id="run-coverage-plot")
    with gr.Row():
        waste_plot = gr.Plot(label="Wasted share", elem_id="run-waste-plot")
        overlap_plot = gr.Plot(label="Overlap", elem_id="run-overlap-plot")
    with gr.Row():
        trainer_plot = gr.Plot(label="What the trainer measured", elem_id="run-trainer-plot")
    trainer_note = gr.Markdown(elem_id="run-trainer-note")
    table = gr.Dataframe(interactive=False, elem_id="run-steps", label="Steps (click one)")
    with gr.Row():
        prev_btn = gr.Button("◀ previous step", elem_id="run-prev")
        next_btn = gr.Button("next step ▶", elem_id="run-next")
        download = gr.DownloadButton(
            "Download report (HTML)", visible=False, elem_id="run-download"
        )
    summary = gr.Markdown(elem_id="run-step-summary")
    differ = gr.HTML(elem_id="run-step-differences")
    view_html = gr.HTML(step_html(None), elem_id="run-step-view")
    current = gr.State(None)  # the step view shown (the API's JSON body)
    shown = gr.State(None)  # the run's overview, trimmed to what its charts redraw from
    timer = gr.Timer(METRICS_POLL_S, active=False)

    h = _Handlers(ctx)
    charts = [cover_plot, waste_plot, overlap_plot, trainer_plot, status, timer]
    outputs = [current, summary, differ, view_html]
    asked = [model, ratio, numbers, budget, colour]  # how every step is shown
    # Every event that fills the step view joins one queue, run one at a time in the order it
    # was asked for: a step clicked while the run's first step is still being analysed is shown
    # last, instead of being overwritten by the first step's later answer. (Analysing a step
    # takes the server's job queue anyway, one job at a time by default.)
    # The run's charts likewise: a metrics poll for the run shown before is answered first.
    in_order: dict[str, Any] = {"concurrency_id": STEP_VIEW_QUEUE, "concurrency_limit": 1}
    charts_in_order: dict[str, Any] = {"concurrency_id": CHARTS_QUEUE, "concurrency_limit": 1}
    refresh.click(h.list_runs, None, [run, bad_runs])
    # each page load lists the runs anew: one written since the server started is there
    blocks = Context.root_block
    assert blocks is not None  # built inside the app's gr.Blocks
    blocks.load(h.list_runs, None, [run, bad_runs], show_progress="hidden")
    run.change(
        h.load_run,
        [run, model, ratio, numbers, budget],
        [reward_plot, shown, trainer_note, table, *charts],
        **charts_in_order,
    ).then(h.show_first, [current, run, *asked], outputs, **in_order).then(
        h.report, [run, shown, current], download
    )
    timer.tick(
        h.poll,
        [run, model, ratio, shown, numbers, budget],
        charts,
        show_progress="hidden",
        **charts_in_order,
    )
    stepped = [
        table.select(h.pick, [run, *asked], outputs, **in_order),
        prev_btn.click(
            lambda v, *a: h.move(v, "previous", *a), [current, run, *asked], outputs, **in_order
        ),
        next_btn.click(
            lambda v, *a: h.move(v, "next", *a), [current, run, *asked], outputs, **in_order
        ),
        # the step shown, again, with the other numbers (the dump's, or the model's)
        numbers.change(
            lambda v, *a: h.move(v, "step", *a), [current, run, *asked], outputs, **in_order
        ),
        budget.change(
            lambda v, *a: h.move(v, "step", *a), [current, run, *asked], outputs, **in_order
        ),
    ]
    colour.change(step_html, [current, colour], view_html, show_progress="hidden")
    for event in stepped:  # the report follows the step shown
        event.then(h.report, [run, shown, current], download)
    with gr.Accordion("Analysed runs (gmts analyze-run)", open=True, elem_id="analysed-runs"):
        build_analysed_section(ctx)


class _Handlers:
    """What the tab's events call: each goes to the UI's backend (local or remote)."""

    def __init__(self, ctx: UIContext) -> None:
        self.backend = ctx.backend

    @staticmethod
    def params(model_name: str, r: float, numbers: str = "recomputed", budget: str = "") -> Json:
        return {
            "model": model_name,
            "ratio": r,
            "methods": "entropy,gmts",
            "numbers": numbers,
            "budget_over": budget or ANALYSIS_DEFAULTS.budget_over,
        }

    def list_runs(self) -> tuple[Any, str]:
        runs = call(self.backend.runs)
        return gr.update(choices=run_choices(runs), value=None), unreadable_note(runs)

    def poll(
        self,
        run_id: str | None,
        model_name: str,
        r: float,
        shown: Json | None,
        numbers: str = "recomputed",
        budget: str = "",
    ) -> tuple:
        """The background metrics' charts, and the trainer's chart with the entropy GMTS
        computed for the steps analysed so far (``shown``: the run's overview, trimmed)."""
        if not run_id:
            return (*(gr.update(),) * 4, "", gr.update(active=False))
        params = self.params(model_name, r, numbers, budget)
        metrics = call(lambda: self.backend.run_metrics(run_id, params))
        drawn = metrics.model_dump(mode="json")  # the charts draw the body as the API sends it
        cover, waste, overlap = metrics_figures(drawn)
        reports = drawn["reports"] or (shown or {}).get("reports") or []
        trainer = trainer_metrics_figure(shown or {}, reports)
        running = gr.update(active=metrics.running)
        return cover, waste, overlap, trainer, metrics_status(drawn), running

    def load_run(
        self,
        run_id: str | None,
        model_name: str,
        r: float,
        numbers: str = "recomputed",
        budget: str = "",
    ) -> tuple:
        if not run_id:
            return (None, None, "", None, *self.poll(None, model_name, r, None))
        body = call(lambda: self.backend.run_overview(run_id))
        overview = body.model_dump(mode="json")  # the charts draw the body as the API sends it
        keep = ("trainer_metrics", "overview", "reports")  # what the trainer's chart needs
        shown = {k: overview.get(k) for k in keep}
        return (
            overview_figures(overview)[0],
            shown,
            trainer_metrics_note(overview),
            steps_table(overview),
            *self.poll(run_id, model_name, r, shown, numbers, budget),
        )

    def show(self, run_id: str | None, step: int | None, *asked: Any) -> tuple:
        """Step ``step`` of the run, as ``asked`` (model, ratio, numbers, budget, colour)."""
        model_name, r, numbers, budget, colour = asked
        if not run_id or step is None:
            return None, step_summary(None), "", step_html(None)
        params = self.params(model_name, r, numbers, budget)
        body = call(lambda: self.backend.run_step(run_id, int(step), params))
        view = body.model_dump(mode="json")  # the views draw the body as the API sends it
        return view, step_summary(view), step_differences(view), step_html(view, colour)

    def show_first(self, view: Json | None, run_id: str | None, *asked: Any) -> tuple:
        """The run's first step, unless a step of this run is already shown (one the user
        clicked got there first: the state is read when this event runs, not when it fired)."""
        if not run_id:
            return self.show(None, None, *asked)
        if view and view.get("run") == run_id:
            return (gr.skip(),) * 4
        first = call(lambda: self.backend.run_overview(run_id)).steps[0]
        return self.show(run_id, first, *asked)

    def report(self, run_id: str | None, shown: Json | None, view: Json | None) -> Any:
        """The download of the tab as it is (the run's charts and words, the step shown)."""
        if not run_id:
            return gr.DownloadButton(visible=False)
        page = report_page(run_id, shown, view)
        label = "Download report (HTML)" + (f": step {view['step']}" if view else "")
        path = write_download(page, "run", "html")
        return gr.DownloadButton(label, value=str(path), visible=True)

    def pick(
        self,
        run_id: str | None,
        model_name: str,
        r: float,
        numbers: str,
        budget: str,
        colour: str,
        evt: gr.SelectData,
    ) -> tuple:
        row = evt.row_value or []
        step = int(row[0]) if row else None
        return self.show(run_id, step, model_name, r, numbers, budget, colour)

    def move(self, view: Json | None, key: str, run_id: str | None, *asked: Any) -> tuple:
        """The step before or after the one shown (``key``: previous, next), or the one
        shown again (``step``: other numbers asked)."""
        target = view.get(key) if view else None
        if view is None or target is None or view.get("run") != run_id:
            return view, step_summary(view), step_differences(view), step_html(view, asked[-1])
        return self.show(run_id, target, *asked)


TAB = Tab("Runs", "runs", build_runs_tab)
