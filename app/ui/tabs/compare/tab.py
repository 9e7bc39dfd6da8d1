"""The Compare tab's wiring: the form, Run compare (with progress), loading a compare.json, the
figures, the table and the downloads.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from app.services.compare import CompareResult, load_compare_file
from app.ui import numbers
from app.ui.choices import method_choices
from app.ui.context import Tab, UIContext, call
from app.ui.limited import LR_CONTROL_MAX, SANE_LR, limit_slider, lr_warning
from app.ui.tabs.compare.view import (
    FIGURE_LABELS,
    FIGURES,
    MAX_TAB_SEEDS,
    NOISE_KNOBS,
    RL_KNOBS,
    RUN_KNOBS,
    UI_COMPARE,
    compare_view,
    form_config,
    form_default,
    write_downloads,
)

FORM_FIELDS = ["model", "methods", *RUN_KNOBS, *RL_KNOBS, *NOISE_KNOBS]


def _controls(ctx: UIContext) -> dict[str, Any]:
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
        c["ratio"] = numbers.slider(0.05, 1.0, d("ratio"), step=0.05, label="Ratio")
        c["steps"] = numbers.slider(
            1, 30, d("steps"), step=1, label="Steps", elem_id="compare-steps"
        )
        c["seeds"] = numbers.slider(
            1, MAX_TAB_SEEDS, d("seeds"), step=1, label="Seeds", elem_id="compare-seeds",
            info="1 seed: no verdict (no seed-to-seed variance); more: `gmts compare`",
        )  # fmt: skip
        c["group_size"] = numbers.slider(
            2, 16, d("group_size"), step=1, label="Group size G", elem_id="compare-g"
        )
        # up to this server's limit (GMTS_MAX_STEP_PROMPTS), as the Train tab's control
        max_prompts = int(ctx.capabilities.limits.get("max_step_prompts", 64))
        c["prompts_per_step"] = limit_slider(
            1, max_prompts, d("prompts_per_step"), step=1, label="Prompts per step",
            elem_id="compare-prompts",
        )  # fmt: skip
    with gr.Row():
        c["max_new_tokens"] = numbers.slider(
            8, 128, d("max_new_tokens"), step=4, label="Max new tokens", elem_id="compare-max-new"
        )
        # the range stops where the demo model still learns (as the Train tab's control)
        c["learning_rate"] = numbers.number(
            d("learning_rate"), label="Learning rate", minimum=0, maximum=LR_CONTROL_MAX,
            step=1e-5, elem_id="compare-lr",
            info=f"{d('learning_rate'):g} learns on the demo model; above {SANE_LR[1]:g} a "
            f"warning (held-out accuracy falls); at most {LR_CONTROL_MAX:g}",
        )  # fmt: skip
        c["eval_every"] = numbers.slider(
            1, 30, d("eval_every"), step=1, label="Evaluate every", elem_id="compare-ee"
        )
        c["eval_problems"] = numbers.slider(
            10, 400, d("eval_problems"), step=10, label="Held-out problems", elem_id="compare-eval"
        )
    with gr.Row():  # the noise's controls: which runs and which evaluation draws
        c["seed_offset"] = numbers.number(
            d("seed_offset"), label="First training seed", precision=0, minimum=0,
            elem_id="compare-seed-offset",
        )  # fmt: skip
        c["eval_seed"] = numbers.number(
            d("eval_seed"), label="Evaluation seed", precision=0, minimum=0,
            elem_id="compare-eval-seed",
        )  # fmt: skip
        c["eval_samples"] = numbers.slider(
            1, 8, d("eval_samples"), step=1, label="Answers per problem",
            elem_id="compare-eval-samples",
        )  # fmt: skip
        c["eval_temperature"] = numbers.slider(
            0.0, 2.0, d("eval_temperature"), step=0.1, label="Evaluation temperature",
            elem_id="compare-eval-temperature",
        )  # fmt: skip
    return {name: c[name] for name in FORM_FIELDS}


def _outputs() -> list[Any]:
    summary = gr.Markdown(elem_id="compare-summary")
    gr.Markdown(
        "**Final table**: mean [95% t interval over seeds and held-out problems]; the paired "
        "difference to entropy, 'within noise' when its interval holds 0, 'differs' when it "
        "does not; one seed: no verdict.",
        elem_classes="compare-table-note",
    )
    table = gr.HTML(elem_id="compare-table")
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


def build_compare_tab(ctx: UIContext) -> None:
    """Compare: run a small comparison here, or load a finished compare.json."""
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
        config = call(lambda: form_config(**form))
        if (warning := lr_warning(config.rl.learning_rate)) is not None:
            gr.Warning(warning)

        def tick(done: int, total: int, label: str) -> None:
            progress((done, total), desc=label)

        return show(call(lambda: ctx.backend.compare(model, config, tick)))

    def load(path: str | None, request: gr.Request) -> list[Any]:
        if not path:
            raise gr.Error(
                "Choose a compare.json file (written by `gmts compare --out DIR`).",
                print_exception=False,
            )
        ctx.uploads.track(request, path)  # deleted when this browser session ends
        return show(call(lambda: load_compare_file(path)))

    run_btn.click(run, list(form.values()), outputs)
    upload.upload(load, [upload], outputs)


TAB = Tab("Compare", "compare", build_compare_tab)
