"""The Explore tab's wiring: the form (:mod:`.controls`), Analyze and Analyze batch, the views
and the downloads.

Every handler converts component values, calls a Gradio-free function (:mod:`.view`,
:mod:`.batch`, :mod:`app.ui.render`, :mod:`app.ui.charts`) or the backend through
:func:`app.ui.context.call`, so library errors reach the person as ``gr.Error`` with the
library's message. Explore creates the shared ``result`` drill-down (``ctx.group``) and the Learn
view (``ctx.learn_view``) that later tabs read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr
from gradio.context import Context

from app.services.responses import as_json
from app.ui import charts, choices, sketch, status
from app.ui.context import Tab, UIContext, call
from app.ui.tabs.explore import batch, example, view
from app.ui.tabs.explore.controls import FORM_FIELDS, explore_controls
from app.ui.tabs.explore.export import write_exports
from app.ui.tabs.explore.spotlight import spotlight_html
from app.ui.tabs.explore.view_export import write_view_html


def _form(values: Sequence[Any]) -> view.ExploreForm:
    return view.ExploreForm(**dict(zip(FORM_FIELDS, values, strict=True)))


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
    overview: gr.HTML
    budget: gr.Plot
    batch_box: gr.Column
    why: gr.HTML  # why Method A and B differ
    spotlight: gr.HTML  # the two answers that show the disagreement (.spotlight)
    group: gr.Dropdown  # drill-down: which group the views show
    color_by: gr.Dropdown
    csv: gr.DownloadButton
    json: gr.DownloadButton
    html: gr.DownloadButton

    def text_list(self) -> list[Any]:
        return [self.view_list()[i] for i in TEXT_VIEWS]

    def chart_list(self) -> list[Any]:
        return [self.view_list()[i] for i in CHART_VIEWS]

    def view_list(self) -> list[Any]:
        return [
            self.notes, self.tokens, self.summary, self.scatter, self.distributions,
            self.positions, self.advantages, self.learn, self.overview, self.budget,
            self.batch_box, self.why, self.spotlight,
        ]  # fmt: skip


# positions in ``ExploreOutputs.view_list()``: what a reader waits for (the tokens, and the
# disagreement above them), and the rest (the charts, the groups' overview, the Learn tab's
# card), which a new result sends in a second event, so that the browser paints the tokens
# before it draws a chart
TEXT_VIEWS = (0, 1, 2, 11, 12)  # notes, tokens, summary, why, spotlight
CHART_VIEWS = (3, 4, 5, 6, 7, 8, 9, 10)  # the four charts, learn, overview, budget, batch box
# of the first render, what the page's load events send rather than the first config: the
# charts but the first (the scatter, whose value in the config lets Gradio start loading Plotly
# as it mounts the tab: ~13 kB), then the Learn card (~100 kB, another tab's) in an event of
# its own, so that the charts' message does not wait for it
FIRST_CHART = 3  # the scatter
DEFERRED_CHARTS = (4, 5, 6, 9)  # distributions, positions, advantages, budget
DEFERRED_LEARN = (7,)
DEFERRED = DEFERRED_CHARTS + DEFERRED_LEARN


def deferred_views(positions: Sequence[int]) -> Callable[..., list[Any]]:
    """The page-load handler that sends the values at ``positions`` of
    ``ExploreOutputs.view_list()`` (of ``DEFERRED``) for the current result."""

    def handler(result: Any, a: str, b: str, color_by: str, group: Any) -> list[Any]:
        if positions == DEFERRED_LEARN:  # no chart is built for the card alone
            return [view.learn_view(result, a, b, int(group or 0))]
        values = chart_views(result, a, b, color_by, group)
        return [values[CHART_VIEWS.index(i)] for i in positions]

    return handler


# the page-load event that sends the other charts waits until the scatter is drawn (or is not
# on the page), so that Plotly draws it first rather than fifth, then the rest; 10 s at most
AFTER_FIRST_CHART = (
    "(...args) => new Promise(done => {"
    " const drawn = () => !document.getElementById('scatter-plot')"
    " || document.querySelector('#scatter-plot .js-plotly-plot .main-svg');"
    " const go = () => { watch.disconnect(); clearTimeout(timer); done(args); };"
    " const watch = new MutationObserver(() => { if (drawn()) go(); });"
    " const timer = setTimeout(go, 10000);"
    " if (drawn()) go(); else watch.observe(document.body, {childList: true, subtree: true});"
    " })"
)
EXAMPLE_VIEW = ("entropy", "gmts", "entropy", 0)
"""Method A, method B, colour by and group of the shipped example's first render
(:func:`initial_values`)."""


class ExampleViews:
    """The page-load handlers of ``DEFERRED`` views: for the shipped example as the page opens
    on it (the same result, :data:`EXAMPLE_VIEW`), the values of its first render, computed
    and post-processed once when the UI is built (every new page asked for the same figures
    and Learn card: ~0.15 CPU-s of the server's on each page's path to its charts); for anything
    else (a form changed before the event ran), computed as any view is."""

    def __init__(self, example: Any, components: list[Any], first: list[Any]) -> None:
        self.example = example
        self.ready = {i: components[i].postprocess(first[i]) for i in DEFERRED}

    def handler(self, positions: Sequence[int]) -> Callable[..., list[Any]]:
        compute = deferred_views(positions)

        def handler(result: Any, a: str, b: str, color_by: str, group: Any) -> list[Any]:
            if (a, b, color_by, int(group or 0)) == EXAMPLE_VIEW and result == self.example:
                return [self.ready[i] for i in positions]
            return compute(result, a, b, color_by, group)

        return handler


def text_views(result: Any, a: str, b: str, color_by: str, group: Any) -> list[Any]:
    """The text views (``TEXT_VIEWS`` order) of the current result: no chart is built."""
    gi = int(group or 0)
    v = view.explore_view(result, a, b, color_by, gi, with_figures=False, with_learn=False)
    notes = "\n".join(f"- {n}" for n in v.notes)
    batch_view = _is_batch(result) and _has_view(result, a, b)
    if batch_view:
        notes = (batch.batch_notes(result) + "\n" + notes).strip()
    spotlight = spotlight_html(result, (a, b)) if batch_view else ""
    return [notes, v.tokens_html, charts.summary_html(v.summary_rows), v.why_html, spotlight]


def chart_views(result: Any, a: str, b: str, color_by: str, group: Any) -> list[Any]:
    """The charts, the Learn tab's card, the groups' overview and the batch box
    (``CHART_VIEWS`` order)."""
    figures = (
        charts.group_figures(result, (a, b), int(group or 0)) if _has_view(result, a, b) else {}
    )
    is_batch = _is_batch(result) and bool(figures)
    return [
        *(figures.get(k) for k in ("scatter", "distributions", "positions", "advantages")),
        view.learn_view(result, a, b, int(group or 0)),
        batch.overview_html(result, (a, b)) if is_batch else "",
        batch.budget_chart(result, (a, b)) if is_batch else None,
        gr.Column(visible=is_batch),
    ]


def _is_batch(result: Any) -> bool:
    return bool(result) and "groups" in result


def _has_view(result: Any, a: str, b: str) -> bool:
    """A result computed with both methods (else the views show a placeholder, no charts)."""
    return bool(result) and not view.missing_methods(result, (a, b))


def views(result: Any, a: str, b: str, color_by: str, group: Any) -> list[Any]:
    """Values for ``ExploreOutputs.view_list()`` from the current result."""
    values: list[Any] = [None] * (len(TEXT_VIEWS) + len(CHART_VIEWS))
    parts = (
        (TEXT_VIEWS, text_views(result, a, b, color_by, group)),
        (CHART_VIEWS, chart_views(result, a, b, color_by, group)),
    )
    for positions, part in parts:
        for i, value in zip(positions, part, strict=True):
            values[i] = value
    return values


def go_to_group(asked: Any, result: Any, a: str, b: str, color_by: str) -> list[Any]:
    """A "why they differ" token of a group not on screen was clicked: the page writes
    "<group> <click count>" into the hidden ``#goto-group`` box (static/gmts.js); the drill-down
    moves to that group and every view follows, as when it is picked under Drill into group."""
    try:
        g = int(str(asked).split()[0])
    except (IndexError, ValueError):
        g = 0
    g = min(max(g, 0), max(len(batch.groups_of(result)) - 1, 0)) if result else 0
    return [gr.Dropdown(value=g), *views(result, a, b, color_by, g)]


def new_result(result: Any, a: str, b: str, color_by: str) -> list[Any]:
    """What changes at once when a new analysis arrives: state, drill-down, the text views
    (the charts follow in ``chart_views``). ``result`` is the analysis as its JSON body, the
    form the shipped example, an uploaded file and the downloads hold too."""
    choices = batch.group_choices(result)
    return [result, gr.Dropdown(choices=choices, value=0), *text_views(result, a, b, color_by, 0)]


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
    "**Example** on the bundled model: {groups} prompts, {g} answers each. The two answers at "
    "the top show where entropy and GMTS part ways; **Why they differ** counts every such "
    "token. Below: one group at a time (**Drill into group**). Press **Analyze** to run your own."
)


def example_note(initial: Any) -> str:
    """The line that introduces the default example (the numbers are in the spotlight's
    sentences, which are computed from the result)."""
    groups = batch.groups_of(initial)
    return EXAMPLE_NOTE.format(
        groups=len(groups), g=len(groups[0].get("answers", [])) if groups else 0
    )


def initial_values(initial: Any) -> list[Any]:
    """Values of ``ExploreOutputs.view_list()`` on the first render: the shipped example, its
    notes replaced by one line that says what it shows (they would repeat it)."""
    values = views(initial, *EXAMPLE_VIEW)
    if initial:
        values[0] = example_note(initial)
    return values


def example_sketch(figure: Any) -> str:
    """The server-drawn SVG of the example's scatter (:mod:`app.ui.sketch`), shown until
    Plotly has drawn the chart itself ("" without a figure)."""
    return sketch.scatter_svg(figure.to_plotly_json()) if figure is not None else ""


def _plots(initial: list[Any]) -> dict[str, gr.Plot]:
    """The four per-group charts, two per row (one per row on a phone); above the scatter,
    the example's static sketch of it until Plotly has drawn it."""
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
                if key != "scatter":
                    plots[key] = gr.Plot(value, label=label, elem_id=f"{key}-plot", min_width=300)
                    continue
                with gr.Column(min_width=300, elem_id="scatter-box"):
                    drawing = example_sketch(value)
                    gr.HTML(
                        drawing,
                        visible=bool(drawing),
                        elem_id=sketch.SKETCH_ID,
                        js_on_load=sketch.SKETCH_LATCH,
                        padding=False,
                    )
                    plots[key] = gr.Plot(value, label=label, elem_id=f"{key}-plot", min_width=300)
    return plots


def disagreement_row(first: list[Any]) -> tuple[gr.HTML, gr.HTML]:
    """The spotlight and "Why they differ" side by side, above the form (after Analyze on a
    phone, static/gmts.css), so the first screen shows the disagreement without a click."""
    with gr.Row(equal_height=False, elem_id="disagreement-row"):
        with gr.Column(scale=3, min_width=300):
            spotlight = gr.HTML(first[12], elem_id="spotlight-view", js_on_load=None)
        with gr.Column(scale=2, min_width=300):
            why = gr.HTML(first[11], elem_id="why-differ-view")
    return spotlight, why


def _outputs_panel(
    initial: Any, color_by: gr.Dropdown, first: list[Any], row: tuple[gr.HTML, gr.HTML]
) -> ExploreOutputs:
    """Every output component, filled with the shipped example (``initial``) when there is one."""
    spotlight, why = row
    notes = gr.Markdown(first[0], elem_id="notes")
    is_batch = bool(initial) and "groups" in initial
    tokens = gr.HTML(first[1], elem_id="token-view", js_on_load=None)
    summary = gr.HTML(first[2], elem_id="summary-table")  # wraps on a phone (a table would not)
    with gr.Column(visible=is_batch, elem_id="batch-box") as batch_box:
        group = gr.Dropdown(
            batch.group_choices(initial),
            value=0 if is_batch else None,
            label="Drill into group",
            elem_id="group-select",
        )
        gr.Markdown("#### Groups")
        # a table on a wide screen, a card per group on a phone (app.ui.tables.card_table)
        overview = gr.HTML(first[8] if is_batch else "", elem_id="batch-overview")
        budget = gr.Plot(first[9], label="Selection budget per group", elem_id="budget-plot")
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
        plots["advantages"], learn, overview, budget, batch_box, why, spotlight, group, color_by,
        *downloads,
    )  # fmt: skip


def build_explore_tab(ctx: UIContext) -> None:
    """Explore: the form, Analyze, the batch view and every output."""
    # the shipped example; its charts but the scatter, and the Learn card (below the fold,
    # Learn in another tab), are not in the first page: the page's load events send them
    # (``DEFERRED``), so the config the browser parses before the first interactive token is
    # smaller
    every_first = initial_values(ctx.result.value)
    first = [None if i in DEFERRED else v for i, v in enumerate(every_first)]
    row = disagreement_row(first)
    real_model = gr.Button(example.REAL_MODEL_BUTTON, elem_id="real-model-btn", size="sm")
    controls = explore_controls(ctx)
    form, buttons = controls.form, controls.buttons
    with gr.Column(elem_id="explore-results"):  # marked out of date when a run fails
        out = _outputs_panel(ctx.result.value, buttons.color_by, first, row)
        goto = gr.Textbox(visible="hidden", elem_id="goto-group", label="go to group")
    ctx.group, ctx.learn_view = out.group, out.learn
    a, b, color_by = form["method_a"], form["method_b"], out.color_by
    new_outputs = [ctx.result, out.group, *out.text_list()]
    methods = choices.method_names(ctx.capabilities)  # fixed when the UI is built

    def run_single(*values: Any, progress: Any = gr.Progress()) -> list[Any]:
        f = _form(values[:-1])
        body = call(lambda: view.build_request(f, methods))
        load = status.job_load(ctx.backend)
        progress(0, desc=status.analyze_text(load, body.get("num_samples")))
        result = call(lambda: ctx.backend.analyze(body, status.on_progress(progress)))
        if view.rule_overridden(f):  # say which rewards were used
            gr.Info(view.reward_note(f))
        return new_result(as_json(result), f.method_a, f.method_b, values[-1])

    def run_batch(*values: Any, progress: Any = gr.Progress()) -> list[Any]:
        f = _form(values[:-2])
        body = call(lambda: batch.build_batch_request(f, values[-2], methods))
        progress(0, desc=status.analyze_text(status.job_load(ctx.backend), None))
        result = call(lambda: ctx.backend.analyze(body, status.on_progress(progress)))
        return new_result(as_json(result), f.method_a, f.method_b, values[-1])

    inputs = list(form.values())
    view_inputs = [ctx.result, a, b, color_by, out.group]
    runs: list[tuple[gr.Button, Callable[..., list[Any]], list[Any]]] = [
        (buttons.analyze, run_single, []),
        (buttons.batch, run_batch, [buttons.batch_text]),
    ]

    def then_draw(event: Any) -> None:
        drawn = event.success(chart_views, view_inputs, out.chart_list(), js=SCROLL_TO_RESULTS)
        done = drawn.then(exports, [ctx.result], [out.csv, out.json])
        done.then(html_export, view_inputs, out.html)
        event.failure(None, None, None, js=MARK_STALE)

    for btn, fn, extra in runs:
        then_draw(btn.click(fn, [*inputs, *extra, color_by], new_outputs))
    # the real-model example: fill the form, then run it as Analyze does
    filled = real_model.click(
        example.real_model_values, None, [form[name] for name in example.REAL_MODEL_FIELDS]
    )
    then_draw(filled.then(run_single, [*inputs, color_by], new_outputs))
    buttons.demo.click(
        lambda seed: batch.demo_batch_text(int(seed or 0)), [form["seed"]], buttons.batch_text
    )
    for trigger in (a, b, color_by, out.group):
        trigger.input(views, view_inputs, out.view_list()).then(html_export, view_inputs, out.html)
    goto.change(go_to_group, [goto, *view_inputs[:-1]], [out.group, *out.view_list()]).then(
        html_export, view_inputs, out.html
    )
    blocks = Context.root_block
    if ctx.result.value and blocks is not None:  # the shipped example's deferred charts, Learn
        every = out.view_list()
        example_views = ExampleViews(ctx.result.value, every, every_first)
        charts_then = blocks.load(
            example_views.handler(DEFERRED_CHARTS),
            view_inputs,
            [every[i] for i in DEFERRED_CHARTS],
            show_progress="hidden",
            js=AFTER_FIRST_CHART if FIRST_CHART not in DEFERRED_CHARTS else None,
        )
        charts_then.then(
            example_views.handler(DEFERRED_LEARN),
            view_inputs,
            [every[i] for i in DEFERRED_LEARN],
            show_progress="hidden",
        )


TAB = Tab("Explore", "explore", build_explore_tab)
