"""The Compare tab: selection methods compared by training, run here or loaded from a file.

A run goes through the backend to the compare service (the local backend only: it holds a job
slot for the whole run and the server's per-step limits apply, so the UI keeps its sizes small);
a finished run of ``gmts compare --out DIR`` is loaded from ``DIR/compare.json``. Either way the
tab shows what ``compare.html`` shows, built by the same functions
(:mod:`app.reports.compare_report`): held-out
accuracy and training reward per method (mean ± std band over seeds), the wasted share of each
method's selection per step, and the final table.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.reports.compare_report import TABLE_HEADER, compare_figures, table_rows
from app.services.catalog import RL_DEFAULTS
from app.services.compare import (
    CompareConfig,
    CompareResult,
    compare_config,
    load_compare_file,
    result_from_dict,
    write_outputs,
)
from app.ui.palette import method_color

Json = dict[str, Any]
FIGURES = ("accuracy", "reward", "wasted_share", "loss")
FIGURE_LABELS = {
    "accuracy": "Held-out accuracy",
    "reward": "Training reward",
    "wasted_share": "Wasted share",
    "loss": "Loss",
}


# The tab's preset: small runs (about a minute on 2 CPU cores) over the RL defaults. The form
# shows these knobs of the compare (RUN_KNOBS) and of its GRPO steps (RL_KNOBS), at these values.
UI_COMPARE = CompareConfig(
    methods=("entropy", "gmts"),
    steps=6,
    seeds=1,
    eval_every=3,
    eval_problems=50,
    rl=dataclasses.replace(RL_DEFAULTS, group_size=4, prompts_per_step=2, max_new_tokens=48),
)
RUN_KNOBS = ("ratio", "steps", "seeds", "eval_every", "eval_problems")
RL_KNOBS = ("group_size", "prompts_per_step", "max_new_tokens", "learning_rate")


def form_default(name: str) -> Any:
    """The preset's value of the form knob ``name``."""
    return getattr(UI_COMPARE, name) if name in RUN_KNOBS else getattr(UI_COMPARE.rl, name)


def form_config(methods: Sequence[str], **knobs: Any) -> CompareConfig:
    """The run's config: the form's ``knobs`` (any of RUN_KNOBS and RL_KNOBS; the preset's
    where left out) over the RL defaults, validated."""
    run = {k: knobs.get(k, form_default(k)) for k in RUN_KNOBS}
    rl = {k: type(form_default(k))(knobs[k]) for k in RL_KNOBS if k in knobs}  # sliders: floats
    return compare_config(tuple(methods or ()), **run, base=UI_COMPARE.rl, **rl)


# --- the view ---------------------------------------------------------------------------------


def summary_markdown(result: CompareResult) -> str:
    c = result.config
    return (
        f"**{result.model}** · methods {', '.join(c.methods)} · ratio {c.ratio:g} · "
        f"{c.steps} steps × {c.seeds} seed(s) · G = {c.rl.group_size}, "
        f"{c.rl.prompts_per_step} prompts per step · held-out problems {c.eval_problems} · "
        f"start accuracy **{result.start_accuracy:.3f}** · wall time {result.seconds:.0f} s"
    )


def compare_view(result: CompareResult) -> list[Any]:
    """Summary, final table and the four figures, in ``FIGURES`` order."""
    import pandas as pd

    figs = compare_figures(result, method_color)
    table = pd.DataFrame(table_rows(result), columns=TABLE_HEADER)
    return [summary_markdown(result), table, *(figs[k] for k in FIGURES)]


def write_downloads(result: CompareResult) -> tuple[Path, Path]:
    """compare.json and compare.html of ``result`` in a fresh temporary folder."""
    json_path, html_path, _table = write_outputs(
        result, Path(tempfile.mkdtemp(prefix="gmts-compare-"))
    )
    return json_path, html_path


# --- Gradio wiring ----------------------------------------------------------------------------

FORM_FIELDS = ["model", "methods", *RUN_KNOBS, *RL_KNOBS]


def _controls(ctx: Any) -> dict[str, Any]:
    import gradio as gr

    from app.ui.explore import method_choices

    models, default_model = ctx.backend.models()
    c: dict[str, Any] = {}
    c["model"] = gr.Dropdown(models, value=default_model, label="Model", allow_custom_value=True)
    c["methods"] = gr.CheckboxGroup(
        method_choices(ctx.capabilities),
        value=list(UI_COMPARE.methods),
        label="Methods",
        elem_id="compare-methods",
    )
    d = form_default
    with gr.Row():
        c["ratio"] = gr.Slider(0.05, 1.0, d("ratio"), step=0.05, label="Ratio")
        c["steps"] = gr.Slider(1, 30, d("steps"), step=1, label="Steps", elem_id="compare-steps")
        c["seeds"] = gr.Slider(1, 3, d("seeds"), step=1, label="Seeds", elem_id="compare-seeds")
        c["group_size"] = gr.Slider(
            2, 16, d("group_size"), step=1, label="Group size G", elem_id="compare-g"
        )
        c["prompts_per_step"] = gr.Slider(
            1, 8, d("prompts_per_step"), step=1, label="Prompts per step", elem_id="compare-prompts"
        )
    with gr.Row():
        c["max_new_tokens"] = gr.Slider(
            8, 128, d("max_new_tokens"), step=4, label="Max new tokens", elem_id="compare-max-new"
        )
        c["learning_rate"] = gr.Number(
            d("learning_rate"), label="Learning rate", minimum=0, maximum=1, step=1e-5
        )
        c["eval_every"] = gr.Slider(
            1, 30, d("eval_every"), step=1, label="Evaluate every", elem_id="compare-ee"
        )
        c["eval_problems"] = gr.Slider(
            10, 400, d("eval_problems"), step=10, label="Held-out problems", elem_id="compare-eval"
        )
    return {name: c[name] for name in FORM_FIELDS}


def _outputs() -> list[Any]:
    import gradio as gr

    summary = gr.Markdown(elem_id="compare-summary")
    table = gr.Dataframe(
        headers=TABLE_HEADER, label="Final table (± std with several seeds)", interactive=False,
        elem_id="compare-table",
    )  # fmt: skip
    plots = []
    for i in range(0, len(FIGURES), 2):
        with gr.Row():
            plots += [
                gr.Plot(
                    label=FIGURE_LABELS[k],
                    elem_id=f"compare-{k.replace('_', '-')}-plot",
                    min_width=300,
                )
                for k in FIGURES[i : i + 2]
            ]
    return [summary, table, *plots]


def build_compare_tab(ctx: Any) -> None:
    """Compare: run a small comparison here, or load a finished compare.json."""
    import gradio as gr

    from app.ui.blocks import _call

    gr.Markdown(
        "Every method trains from the **same start with the same batches** (per seed) on the "
        "demo task. Small runs here (the server runs one heavy job at a time); for the full "
        "table run `gmts compare --out DIR` and load `DIR/compare.json`."
    )
    form = _controls(ctx)
    with gr.Row():
        run_btn = gr.Button("Run compare", variant="primary", elem_id="compare-run-btn")
        upload = gr.File(
            label="…or load compare.json", file_types=[".json"], elem_id="compare-upload"
        )
    with gr.Row():
        json_btn = gr.DownloadButton("Download JSON", visible=False, elem_id="compare-json")
        html_btn = gr.DownloadButton("Download HTML", visible=False, elem_id="compare-html")
    outputs = [*_outputs(), json_btn, html_btn]

    def show(result: CompareResult) -> list[Any]:
        json_path, html_path = write_downloads(result)
        return [
            *compare_view(result),
            gr.DownloadButton(value=str(json_path), visible=True),
            gr.DownloadButton(value=str(html_path), visible=True),
        ]

    def run(*values: Any, progress: Any = gr.Progress()) -> list[Any]:
        form = dict(zip(FORM_FIELDS, values, strict=True))
        model = form.pop("model")
        config = _call(lambda: form_config(**form))

        def tick(done: int, total: int, label: str) -> None:
            progress((done, total), desc=label)

        data = _call(lambda: ctx.backend.compare(model, config, tick))
        return show(_call(lambda: result_from_dict(data)))

    def load(path: str | None) -> list[Any]:
        if not path:
            raise gr.Error("Choose a compare.json file (written by `gmts compare --out DIR`).")
        return show(_call(lambda: load_compare_file(path)))

    run_btn.click(run, list(form.values()), outputs)
    upload.upload(load, [upload], outputs)
