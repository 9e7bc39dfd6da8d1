"""The Gradio Blocks of GMTS Explorer: wiring only, components -> functions.

Every handler here converts component values, calls a Gradio-free function (``explore``,
``batch``, ``render``, ``charts``, ``learn``) or the backend, and turns library errors into
``gr.Error`` with the library's message. Each tab is built by its own function taking a
:class:`UIContext`, so later tabs (Train, Compare, "How good is the proxy?") plug in through
``extra_tabs`` without touching the Explore tab.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
import pandas as pd

from app.services.errors import GMTSError
from app.ui import batch, example, explore, status
from app.ui.charts import summary_html
from app.ui.client import Backend, Json
from app.ui.explore_controls import FORM_FIELDS, explore_controls
from app.ui.export import write_exports
from app.ui.view_export import write_view_html

logger = logging.getLogger(__name__)

INTRO = (
    "**GMTS Explorer — which answer tokens drive learning?** Sample a group of answers "
    "(or paste your own), reward them, and compare which tokens two "
    "selection methods would train on: **entropy** (the 80/20 rule) vs **gmts** (gradient "
    "magnitude). Hover a token for its numbers."
)


@dataclass
class UIContext:
    """What every tab builder can reach: the backend, settings and shared state."""

    backend: Backend
    settings: Any
    result: gr.State  # the current analysis (the API's JSON body) or None
    capabilities: Json = field(default_factory=dict)  # the backend's GET /v1/capabilities
    method_a: gr.Dropdown | None = None
    method_b: gr.Dropdown | None = None
    extras: dict[str, Any] = field(default_factory=dict)


TabBuilder = Callable[[UIContext], None]


def backend_capabilities(backend: Backend) -> Json:
    """What the backend offers (its methods, rules, limits); the local catalog if a remote
    server cannot be asked (the UI still builds, and says so in the log)."""
    try:
        return backend.capabilities()
    except GMTSError as exc:
        from app.core.config import Settings
        from app.services.bodies import as_json
        from app.services.catalog import capabilities

        logger.warning("cannot ask the backend for its capabilities: %s", exc)
        return as_json(capabilities(Settings()))


def method_names(ctx: UIContext) -> list[str]:
    return explore.method_names(ctx.capabilities)


def _call(fn: Callable[[], Any]) -> Any:
    """Run a backend call, turning library errors into messages for the person."""
    try:
        return fn()
    except GMTSError as exc:
        raise gr.Error(str(exc)) from None


def _form(values: Sequence[Any]) -> explore.ExploreForm:
    return explore.ExploreForm(**dict(zip(FORM_FIELDS, values, strict=True)))


@dataclass
class ExploreOutputs:
    """The Explore tab's output components; ``view_list`` is the order ``views`` returns."""

    notes: gr.Markdown
    tokens: gr.HTML
    summary: gr.HTML
    scatter: gr.Plot
    distributions: gr.Plot
    positions: gr.Plot
    advantages: gr.Plot
    learn: gr.HTML  # rendered in the Learn tab
    overview: gr.Dataframe
    budget: gr.Plot
    batch_box: gr.Column
    group: gr.Dropdown  # drill-down: which group the views show
    color_by: gr.Dropdown
    csv: gr.DownloadButton
    json: gr.DownloadButton
    html: gr.DownloadButton

    def view_list(self) -> list[Any]:
        return [
            self.notes, self.tokens, self.summary, self.scatter, self.distributions,
            self.positions, self.advantages, self.learn, self.overview, self.budget,
            self.batch_box,
        ]  # fmt: skip


def views(result: Any, a: str, b: str, color_by: str, group: Any) -> list[Any]:
    """Values for ``ExploreOutputs.view_list()`` from the current result."""
    gi = int(group or 0)
    v = explore.explore_view(result, a, b, color_by, gi)
    figs = [v.figures.get(k) for k in ("scatter", "distributions", "positions", "advantages")]
    is_batch = bool(result) and "groups" in result and bool(v.figures)
    notes = "\n".join(f"- {n}" for n in v.notes)
    if is_batch:
        notes = (batch.batch_notes(result) + "\n" + notes).strip()
    return [
        notes,
        v.tokens_html,
        summary_html(v.summary_rows),
        *figs,
        v.learn_html,
        pd.DataFrame(
            batch.overview_rows(result, (a, b)) if is_batch else [],
            columns=batch.overview_headers((a, b)),
        ),
        batch.budget_chart(result, (a, b)) if is_batch else None,
        gr.Column(visible=is_batch),
    ]


def new_result(result: Any, a: str, b: str, color_by: str) -> list[Any]:
    """Everything that changes when a new analysis arrives (state, drill-down, views)."""
    choices = batch.group_choices(result)
    return [result, gr.Dropdown(choices=choices, value=0), *views(result, a, b, color_by, 0)]


def exports(result: Any) -> list[Any]:
    """The download buttons for the current result (CSV: one row per token; JSON: the body)."""
    if not result:
        return [gr.DownloadButton(visible=False), gr.DownloadButton(visible=False)]
    csv_path, json_path = write_exports(result)
    return [
        gr.DownloadButton(value=str(csv_path), visible=True),
        gr.DownloadButton(value=str(json_path), visible=True),
    ]


def html_export(result: Any, a: str, b: str, color_by: str, group: Any) -> Any:
    """The self-contained HTML page of the view as it is now (tokens, marks, tips, summary)."""
    if not result:
        return gr.DownloadButton(visible=False)
    path = write_view_html(result, (a, b), color_by, int(group or 0))
    return gr.DownloadButton(value=str(path), visible=True)


# after a run, bring the new tokens into view (the form can fill the first screen on a phone)
# and drop any "out of date" mark; after a failed run, mark what is shown as out of date
SCROLL_TO_RESULTS = (
    "(...args) => { const el = document.getElementById('notes');"
    " const box = document.getElementById('explore-results');"
    " if (box) box.classList.remove('stale');"
    " if (el) el.scrollIntoView({behavior: 'smooth', block: 'start'}); return args; }"
)
MARK_STALE = (
    "() => { const box = document.getElementById('explore-results');"
    " if (box) box.classList.add('stale'); }"
)
EXAMPLE_NOTE = (
    "**Example** (analysed before you arrived: the bundled demo model, the prompt above, "
    "seed 0). Hover or focus a token for its numbers; press **Analyze** to run your own."
)


def initial_values(initial: Any) -> list[Any]:
    """Values of ``ExploreOutputs.view_list()`` on the first render: the shipped example."""
    values = views(initial, "entropy", "gmts", "entropy", 0)
    if initial:
        values[0] = (EXAMPLE_NOTE + "\n\n" + values[0]).strip()
    return values


def _plots(initial: list[Any]) -> dict[str, gr.Plot]:
    """The four per-group charts, two per row (one per row on a phone)."""
    names = [
        ("scatter", "Entropy vs gradient proxy", initial[3]),
        ("advantages", "Advantages", initial[6]),
        ("distributions", "Distributions", initial[4]),
        ("positions", "By position", initial[5]),
    ]
    plots: dict[str, gr.Plot] = {}
    for i in range(0, len(names), 2):
        with gr.Row():
            for key, label, value in names[i : i + 2]:
                plots[key] = gr.Plot(value, label=label, elem_id=f"{key}-plot", min_width=300)
    return plots


def _outputs_panel(initial: Any, color_by: gr.Dropdown) -> ExploreOutputs:
    """Every output component, filled with the shipped example (``initial``) when there is one."""
    first = initial_values(initial)
    notes = gr.Markdown(first[0], elem_id="notes")
    with gr.Column(visible=False, elem_id="batch-box") as batch_box:
        overview = gr.Dataframe(
            headers=batch.OVERVIEW_HEADERS,
            label="Groups",
            interactive=False,
            wrap=True,
            elem_id="batch-overview",
        )
        group = gr.Dropdown([], value=None, label="Drill into group", elem_id="group-select")
        budget = gr.Plot(label="Selection budget per group", elem_id="budget-plot")
    tokens = gr.HTML(first[1], elem_id="token-view", js_on_load=None)
    summary = gr.HTML(first[2], elem_id="summary-table")  # wraps on a phone (a table would not)
    with gr.Row():
        downloads = [
            gr.DownloadButton(
                f"Download {kind.upper()}",
                visible=False,
                elem_id=f"{kind}-download",
                scale=0,
                min_width=140,
            )  # fmt: skip
            for kind in ("csv", "json")
        ]
        downloads.append(
            gr.DownloadButton(
                "Download view (HTML)",
                value=None,
                visible=False,
                elem_id="html-download",
                scale=0,
                min_width=180,
            )  # fmt: skip
        )
    plots = _plots(first)
    learn = gr.HTML(first[7], render=False, elem_id="learn-view", js_on_load=None)
    return ExploreOutputs(
        notes, tokens, summary, plots["scatter"], plots["distributions"], plots["positions"],
        plots["advantages"], learn, overview, budget, batch_box, group, color_by, *downloads,
    )  # fmt: skip


def build_explore_tab(ctx: UIContext) -> ExploreOutputs:
    """Explore: the form, Analyze, the batch view and every output."""
    form = explore_controls(ctx)
    c = ctx.extras["buttons"]
    analyze_btn, batch_text, demo_btn, batch_btn = (
        c[k] for k in ("analyze_btn", "batch_text", "demo_btn", "batch_btn")
    )
    with gr.Column(elem_id="explore-results"):  # marked out of date when a run fails
        out = _outputs_panel(ctx.result.value, c["color_by"])  # starts as the shipped example
    ctx.extras["explore_outputs"] = out
    a, b, color_by = form["method_a"], form["method_b"], out.color_by
    new_outputs = [ctx.result, out.group, *out.view_list()]

    def run_single(*values: Any, progress: Any = gr.Progress()) -> list[Any]:
        f = _form(values[:-1])
        body = _call(lambda: explore.build_request(f, method_names(ctx)))
        load = status.job_load(ctx.backend)
        progress(0, desc=status.analyze_text(load, body.get("num_samples")))
        result = _call(lambda: ctx.backend.analyze(body, status.on_progress(progress)))
        if explore.rule_overridden(f):  # say which rewards were used
            gr.Info(explore.reward_note(f))
        return new_result(result, f.method_a, f.method_b, values[-1])

    def run_batch(*values: Any, progress: Any = gr.Progress()) -> list[Any]:
        f = _form(values[:-2])
        body = _call(lambda: batch.build_batch_request(f, values[-2], method_names(ctx)))
        progress(0, desc=status.analyze_text(status.job_load(ctx.backend), None))
        result = _call(lambda: ctx.backend.analyze(body, status.on_progress(progress)))
        return new_result(result, f.method_a, f.method_b, values[-1])

    inputs = list(form.values())
    view_inputs = [ctx.result, a, b, color_by, out.group]
    for btn, fn, extra in ((analyze_btn, run_single, []), (batch_btn, run_batch, [batch_text])):
        event = btn.click(fn, [*inputs, *extra, color_by], new_outputs)
        done = event.success(exports, [ctx.result], [out.csv, out.json], js=SCROLL_TO_RESULTS)
        done.then(html_export, view_inputs, out.html)
        event.failure(None, None, None, js=MARK_STALE)
    demo_btn.click(lambda seed: batch.demo_batch_text(int(seed or 0)), [form["seed"]], batch_text)
    for trigger in (a, b, color_by, out.group):
        trigger.input(views, view_inputs, out.view_list()).then(html_export, view_inputs, out.html)
    return out


def build_learn_tab(ctx: UIContext) -> None:
    """Learn: the formulas with the current group's numbers (filled by Explore's handlers)."""
    out: ExploreOutputs = ctx.extras["explore_outputs"]
    out.learn.render()


def build_blocks(
    backend: Backend, settings: Any, extra_tabs: Sequence[tuple[str, TabBuilder]] = ()
) -> gr.Blocks:
    """The whole UI; ``extra_tabs`` are ``(title, builder)`` pairs added after Learn."""
    with gr.Blocks(title="GMTS Explorer", fill_width=True) as demo:
        gr.Markdown(INTRO + f" Backend: `{backend.label}`.")
        # the page opens on the shipped example group, already analysed (see app.ui.example)
        ctx = UIContext(
            backend,
            settings,
            gr.State(example.load_example()),
            capabilities=backend_capabilities(backend),
        )
        with gr.Tabs():
            with gr.Tab("Explore", id="explore", elem_id="tab-explore"):
                build_explore_tab(ctx)
            with gr.Tab("Learn", id="learn", elem_id="tab-learn"):
                build_learn_tab(ctx)
            for title, builder in extra_tabs:
                with gr.Tab(title, elem_id=f"tab-{title.lower().replace(' ', '-')}"):
                    builder(ctx)
    return demo
