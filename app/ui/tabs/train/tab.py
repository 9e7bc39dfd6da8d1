"""The Train tab's wiring: the knobs (at ``TrainForm``'s defaults, within the backend's limits),
Run steps (with progress), Reset, the curves, the history and the last batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import gradio as gr

from app.services.catalog import rl_knob
from app.ui import numbers
from app.ui.choices import method_choices
from app.ui.context import Tab, UIContext, call
from app.ui.limited import LR_CONTROL_MAX, SANE_LR, limit_slider
from app.ui.render import Json, placeholder
from app.ui.tabs.train import real_model
from app.ui.tabs.train.view import (
    DELTA_LOGP_NOTE,
    SKIP,
    TrainForm,
    reset_session,
    run_steps,
    session_markdown,
)

FORM_FIELDS = [name for name in asdict(TrainForm())]
LR_INFO = (
    f"{TrainForm.learning_rate:g} learns on the demo model; above {SANE_LR[1]:g} "
    f"the status warns (held-out accuracy falls); at most {LR_CONTROL_MAX:g}"
)


def help_of(knob: str) -> str:
    """A GRPO knob's one line of help, as documented on RLConfig."""
    return rl_knob(knob)[0]


def _controls(ctx: UIContext) -> dict[str, Any]:
    """The knobs, at the tab's defaults (``TrainForm``) within this server's limits."""
    d = TrainForm()
    models, default_model = ctx.backend.models()
    limits = ctx.capabilities.limits  # the backend's limits
    max_steps = int(limits["max_session_steps"])
    max_prompts = int(limits.get("max_step_prompts", 64))
    c: dict[str, Any] = {}
    with gr.Row():
        c["model"] = gr.Dropdown(
            models, value=default_model, label="Model", allow_custom_value=True,
            elem_id="train-model",
        )  # fmt: skip
        c["method"] = gr.Dropdown(
            method_choices(ctx.capabilities),
            value=d.method,
            label="Selection method",
            elem_id="train-method",
        )
        c["ratio"] = numbers.slider(
            0.05, 1.0, d.ratio, step=0.05, label="Ratio", info=help_of("ratio"),
            elem_id="train-ratio",
        )  # fmt: skip
        # the control's range stops where the demo model's held-out accuracy still holds
        # (docs/live-rl.md); above SANE_LR's top the status warns before the run
        c["learning_rate"] = numbers.number(
            d.learning_rate, label="Learning rate", minimum=0, maximum=LR_CONTROL_MAX,
            step=1e-5, elem_id="train-lr", info=LR_INFO,
        )  # fmt: skip
    with gr.Row():
        c["group_size"] = numbers.slider(2, 16, d.group_size, step=1, label="Group size G",
                                         info=help_of("group_size"), elem_id="train-g")  # fmt: skip
        c["prompts_per_step"] = limit_slider(
            1, max_prompts, d.prompts_per_step, step=1,
            label="Prompts per step", elem_id="train-prompts",
        )  # fmt: skip
        # at most the backend's limit (a slider needs two distinct ends)
        max_new = min(128, int(limits["max_new_tokens"]))
        c["max_new_tokens"] = limit_slider(
            8, max_new, d.max_new_tokens, step=4, label="Max new tokens",
            info=help_of("max_new_tokens"), elem_id="train-max-new",
        )  # fmt: skip
        c["steps"] = limit_slider(
            1, max_steps, d.steps, step=1, label="Steps per run",
            elem_id="train-steps",
        )  # fmt: skip
    with gr.Row():
        c["eval_problems"] = numbers.slider(
            0, 400, d.eval_problems, step=8, label="Held-out problems (0: skip)",
            elem_id="train-eval",
        )  # fmt: skip
        c["eval_every"] = numbers.slider(
            1, 20, d.eval_every, step=1, label="Held-out accuracy every N steps",
            elem_id="train-eval-every",
        )  # fmt: skip
        c["inner_steps"] = numbers.slider(
            1, 8, d.inner_steps, step=1, label="Updates per batch", elem_id="train-inner"
        )
        c["warmup_steps"] = numbers.slider(
            0, 20, d.warmup_steps, step=1, label="Warm-up steps", elem_id="train-warmup"
        )
        c["seed"] = numbers.number(
            d.seed, precision=0, label="Seed", minimum=0, elem_id="train-seed"
        )
    return {name: c[name] for name in FORM_FIELDS}


def _outputs() -> list[Any]:
    status = gr.Markdown(session_markdown(None), elem_id="train-session")
    with gr.Row():
        reward = gr.Plot(label="Reward", elem_id="train-reward-plot", min_width=300)
        loss = gr.Plot(label="Loss", elem_id="train-loss-plot", min_width=300)
    wasted = gr.Plot(label="Wasted share", elem_id="train-wasted-plot")
    gr.Markdown("#### The last batch: selected tokens and their log-prob change")
    batch = gr.HTML(
        placeholder("Run a step to see the batch it trained on."), elem_id="train-batch"
    )
    gr.Markdown("#### Step history")
    # a table on a wide screen, a card per step on a phone (app.ui.tables.card_table)
    table = gr.HTML(elem_id="train-history")
    gr.Markdown(DELTA_LOGP_NOTE, elem_id="train-delta-note")
    return [status, reward, loss, wasted, table, batch]


def build_train_tab(ctx: UIContext) -> None:
    """Train: knobs, Run N steps (with progress), Reset, curves, history, the last batch."""
    gr.Markdown(
        "Live GRPO on **your own copy** of the model (the base model is never changed). Each "
        "step samples G answers for demo-task prompts, rewards them, and trains on the tokens "
        "the method selects. The defaults (32 prompts × G = 8, lr 1.5e-4, 1 update per batch, "
        "5 warm-up steps) raise held-out accuracy within one run of 30 steps: the chart's "
        "points are held-out accuracy on 200 fixed problems every 5 steps, the dashed line "
        "the accuracy at the start, and the label the gain with its 95% interval (paired over "
        "the same problems); the line is the "
        "training reward's 5-step moving average over its faint raw points. Same seed, same "
        "batches: switch the method (or press Reset) and the run so far stays on the chart, "
        "faded, for comparison."
    )
    form = _controls(ctx)
    note = gr.Markdown("", elem_id="train-model-note")  # the real model's batch and cost

    def on_model(model: str | None) -> list[Any]:
        return [*real_model.model_knobs(model).values(), real_model.cost_note(model, cost)]

    cost = real_model.load_cost()
    model_outputs = [form[name] for name in real_model.MODEL_FIELDS]
    form["model"].change(on_model, [form["model"]], [*model_outputs, note])
    with gr.Row():
        run_btn = gr.Button("Run steps", variant="primary", elem_id="train-run-btn")
        reset_btn = gr.Button("Reset to the start", elem_id="train-reset-btn")
    session = gr.State(None)  # this browser tab's session id, created on the first run
    earlier = gr.State([])  # curves of earlier runs, drawn faded (app.ui.tabs.train.earlier_runs)
    # the run's progress (stage, step n of N) in a box of its own, above the status line: drawn
    # over the status line, its text and the faded status read as one
    progress_box = gr.HTML("", elem_id="train-progress")
    outputs = [session, *_outputs(), earlier]

    def run(
        session_id: str | None, runs: list[Json], *values: Any, progress: Any = gr.Progress()
    ) -> Iterator[Any]:
        f = TrainForm(**dict(zip(FORM_FIELDS, values, strict=True)))
        steps = run_steps(ctx.backend, session_id, f, progress, runs or [])
        while (view := call(lambda: next(steps, None))) is not None:
            # mid-run only what moves is sent (TrainView.values); the rest stays as shown
            yield [*(gr.skip() if v is SKIP else v for v in view.values()), gr.skip()]

    # the progress overlay sits on its own box only: the charts and the status stay readable
    run_btn.click(
        run,
        [session, earlier, *form.values()],
        [*outputs, progress_box],
        show_progress_on=[progress_box],
    )
    reset_btn.click(
        lambda sid, runs: call(lambda: reset_session(ctx.backend, sid, runs or [])).values(),
        [session, earlier],
        outputs,
    )


TAB = Tab("Train", "train", build_train_tab)
