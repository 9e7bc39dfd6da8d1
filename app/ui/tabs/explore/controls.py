"""The Explore tab's form: the prompt and answers column (with batch paste), and the settings
column (model, group size, reward rule, the two methods, and "More settings" whose sliders take
their range, default and help from the analysis knobs). Components only, keyed by
:class:`app.ui.tabs.explore.view.ExploreForm` field name; the wiring stays in
:mod:`app.ui.tabs.explore.tab`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import gradio as gr

from app.services.catalog import (
    CONFIGS,
    analysis_knob,
    analysis_knob_default,
    config_default,
    config_knob,
    demo_examples,
)
from app.ui import choices, numbers
from app.ui.context import UIContext
from app.ui.tabs.explore import example, view
from gmts_core.knobs import BUDGET_OVER

FORM_FIELDS = [f.name for f in fields(view.ExploreForm)]
AnalysisConfig, SamplingConfig = CONFIGS["analysis"], CONFIGS["sampling"]


@dataclass
class ExploreButtons:
    """The Explore form's buttons, the batch text and the shading picker (not form fields)."""

    analyze: gr.Button
    batch_text: gr.Textbox
    demo: gr.Button
    batch: gr.Button
    color_by: gr.Dropdown


@dataclass
class ExploreControls:
    """The form's components keyed (and ordered) by ExploreForm field name, and the buttons."""

    form: dict[str, Any]
    buttons: ExploreButtons


def _question(prompt: str) -> str:
    """``Q: 24+68=?`` -> ``24+68=?``: a short label for an example prompt."""
    return prompt.strip().splitlines()[0].removeprefix("Q:").strip()


def _prompt_column(c: dict[str, Any]) -> None:
    """Prompt, reference, Analyze (near the top), the example prompts, pasted answers, batch."""
    examples = demo_examples()
    first = example.example_form()
    c["prompt"] = gr.Textbox(first.prompt, label="Prompt", lines=2, elem_id="prompt")
    c["reference"] = gr.Textbox(
        first.reference, label="Reference answer (for the reward rule)", elem_id="reference"
    )
    c["analyze_btn"] = gr.Button("Analyze", variant="primary", elem_id="analyze-btn")
    with gr.Column(elem_id="explore-extras"):
        gr.Examples(
            [[e.prompt, e.reference] for e in examples],
            [c["prompt"], c["reference"]],
            label="Example prompts (demo task)",
            example_labels=[f"{e.label}: {_question(e.prompt)}" for e in examples],
        )
        with gr.Row(equal_height=False):
            _paste_and_batch(c)


def _paste_and_batch(c: dict[str, Any]) -> None:
    """Two closed accordions side by side: pasted answers (and rewards), a batch of prompts."""
    with gr.Accordion("Paste answers instead of sampling", open=False):
        c["answers_text"] = gr.Textbox(
            "",
            label="Answers: one per line, or blocks separated by '---' lines",
            lines=4,
            elem_id="answers",
        )
        c["explicit_rewards"] = gr.Textbox(
            "",
            label="Explicit rewards (e.g. 1,0,0,1), with reward rule 'explicit rewards'",
            elem_id="explicit-rewards",
        )
    with gr.Accordion("Batch of prompts (selection across groups)", open=False):
        c["batch_text"] = gr.Textbox(
            "",
            lines=6,
            elem_id="batch-text",
            label="Prompts separated by '---' lines; '=> 85' gives a reference",
        )
        c["demo_btn"] = gr.Button("Demo batch (4 prompts)", elem_id="demo-batch-btn")
        c["batch_btn"] = gr.Button("Analyze batch", variant="primary", elem_id="analyze-batch-btn")


def _settings_column(c: dict[str, Any], ctx: UIContext) -> None:
    """Model, group size, reward, the two methods; the rest under "More settings"."""
    models, default_model = ctx.backend.models()
    methods = choices.method_choices(ctx.capabilities)
    c["model"] = gr.Dropdown(models, value=default_model, label="Model", allow_custom_value=True)
    with gr.Row():
        c["group_size"] = config_slider(
            SamplingConfig, "num_samples", 1, 32, step=1, label="Group size G",
            elem_id="group-size",
        )  # fmt: skip
        c["reward_kind"] = gr.Dropdown(
            choices.reward_choices(ctx.capabilities),
            value="numeric",
            label="Reward rule",
            elem_id="reward-kind",
        )
    with gr.Row():
        c["method_a"] = gr.Dropdown(methods, value="entropy", label="Method A", elem_id="method-a")
        c["method_b"] = gr.Dropdown(methods, value="gmts", label="Method B", elem_id="method-b")
        c["color_by"] = gr.Dropdown(
            choices.color_choices(), value="entropy", label="Shade tokens by", elem_id="color-by"
        )
    with gr.Accordion("What do the methods and scopes mean?", open=False, elem_id="method-info"):
        gr.Markdown(choices.methods_markdown(ctx.capabilities))
    with gr.Accordion("More settings", open=False, elem_id="more-settings"):
        with gr.Row():
            c["temperature"] = knob_slider("temperature", 0.1, 2.0, step=0.05, label="Temperature")
            c["max_new_tokens"] = config_slider(
                SamplingConfig, "max_new_tokens", 4, 256, step=4, label="Max new tokens",
                elem_id="max-new-tokens",
            )  # fmt: skip
        with gr.Row():
            c["ratio"] = knob_slider("ratio", 0.05, 1.0, step=0.05, label="Selection ratio")
            _, bounds = analysis_knob("seed")  # also the sampling seed: the label says enough
            c["seed"] = numbers.number(
                config_default(SamplingConfig, "seed"),
                precision=0,
                label="Seed",
                minimum=bounds["ge"],
                maximum=bounds["le"],
            )
        c["scope"] = gr.Radio(
            list(choices.SCOPE_INFO), value=analysis_knob_default("scope"), label="Scope",
            info=analysis_knob("scope")[0] + " (see below)",
        )  # fmt: skip
        with gr.Row():
            # the reasons "why they differ" name |A| and w: both come from these two
            c["advantage"] = gr.Dropdown(
                ctx.capabilities.advantages, value=analysis_knob_default("advantage"),
                label="Advantage estimator", info=analysis_knob("advantage")[0],
                elem_id="advantage",
            )  # fmt: skip
            c["loss_aggregation"] = gr.Dropdown(
                ctx.capabilities.loss_aggregations,
                value=analysis_knob_default("loss_aggregation"), label="Loss aggregation",
                info=analysis_knob("loss_aggregation")[0], elem_id="loss-aggregation",
            )  # fmt: skip
        c["budget_over"] = gr.Radio(
            list(BUDGET_OVER), value=analysis_knob_default("budget_over"), label="Budget counts",
            info=analysis_knob("budget_over")[0], elem_id="budget-over",
        )  # fmt: skip
        c["top_alternatives"] = knob_slider(
            "top_alternatives", 0, 20, step=1, label="Alternatives per token"
        )


def config_slider(config: type, name: str, low: float, high: float, **kwargs: Any) -> gr.Slider:
    """A slider for the knob ``name`` of ``config``: the UI's range ``[low, high]`` within the
    knob's documented bounds, its default, and its help as the slider's info."""
    help_text, bounds = config_knob(config, name)
    low = max(low, bounds.get("ge", bounds.get("gt", low)))
    high = min(high, bounds.get("le", bounds.get("lt", high)))
    return numbers.slider(low, high, config_default(config, name), info=help_text, **kwargs)


def knob_slider(name: str, low: float, high: float, **kwargs: Any) -> gr.Slider:
    """A slider for the analysis knob ``name`` (AnalysisConfig)."""
    return config_slider(AnalysisConfig, name, low, high, **kwargs)


def explore_controls(ctx: UIContext) -> ExploreControls:
    """The Explore form's components and buttons."""
    c: dict[str, Any] = {}
    # on a phone the results come right after Analyze, before the examples and the settings
    # (static/gmts.css reorders these boxes), so tokens are on the first screen
    with gr.Row(equal_height=False, elem_id="explore-form"):
        with gr.Column(scale=3, min_width=300, elem_id="explore-prompt-col"):
            _prompt_column(c)
        with gr.Column(scale=2, min_width=280, elem_id="explore-settings-col"):
            _settings_column(c, ctx)
    buttons = ExploreButtons(
        c["analyze_btn"], c["batch_text"], c["demo_btn"], c["batch_btn"], c["color_by"]
    )
    return ExploreControls({name: c[name] for name in FORM_FIELDS}, buttons)
