"""The Train tab: live GRPO steps on a private session, with curves and per-token changes.

Each browser tab gets its own session (a ``gr.State`` holding its id, created on the first run)
through the backend's ``/v1/sessions`` methods, so the UI works the same against the local
service layer and a remote server. "Run N steps" sends one step request per step, so the
progress bar and the curves move after every step and other users' jobs can run in between.
Everything above the Gradio wiring at the bottom is free of Gradio and tested on its own: the
figures and tables only arrange the session's history (``GET /v1/sessions/{id}``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import plotly.graph_objects as go

from app.services.catalog import RL_DEFAULTS, rl_knob
from app.services.errors import SessionNotFoundError
from app.ui.charts import _LAYOUT, OKABE_ITO
from app.ui.client import Backend
from app.ui.render import Json, _fmt, placeholder, render_batch_changes

logger = logging.getLogger(__name__)

Progress = Callable[..., Any]  # gr.Progress-like: progress((done, total), desc=...)
WASTED_FIRST = ("entropy", "gmts")  # the comparison the wasted-share chart is about


@dataclass
class TrainForm:
    """The Train tab's controls. Knobs apply to every step request; model and seed to the
    session (changing either starts a new session)."""

    model: str | None = None
    method: str = "gmts"
    ratio: float = 0.2
    learning_rate: float = RL_DEFAULTS.learning_rate  # the RL defaults, tuned on the demo model
    group_size: int = 8
    prompts_per_step: int = 4
    max_new_tokens: int = 48
    steps: int = 5
    eval_problems: int = 100  # held-out problems after each run (0: no evaluation)
    seed: int = 0

    def knobs(self) -> Json:
        return {
            "method": self.method,
            "ratio": float(self.ratio),
            "learning_rate": float(self.learning_rate),
            "group_size": int(self.group_size),
            "prompts_per_step": int(self.prompts_per_step),
            "max_new_tokens": int(self.max_new_tokens),
        }

    def create_request(self) -> Json:
        """Body of ``POST /v1/sessions``."""
        return {"model": self.model or None, "seed": int(self.seed), **self.knobs()}

    def step_request(self) -> Json:
        """Body of one ``POST /v1/sessions/{id}/step`` (one step, demo-task batch)."""
        # the Train tab shows each token's log-prob change: ask for the pass after the update
        return {"steps": 1, "include_tokens": True, "measure_logprob_after": True, **self.knobs()}

    def eval_request(self) -> Json:
        return {"num_problems": int(self.eval_problems), "seed": int(self.seed)}


# --- figures and tables from a session's history ---------------------------------------------


def _figure(title: str, y_title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title="step", yaxis_title=y_title, **_LAYOUT)
    fig.update_xaxes(rangemode="tozero")
    return fig


def _line(fig: go.Figure, x: list[Any], y: list[Any], name: str, color: str, **kw: Any) -> None:
    fig.add_trace(
        go.Scatter(x=x, y=y, name=name, mode="lines+markers", line=dict(color=color), **kw)
    )


def reward_figure(history: list[Json], evaluations: list[Json]) -> go.Figure:
    """Training reward (batch mean ± std) per step and held-out accuracy at each evaluation."""
    fig = _figure("Training reward and held-out accuracy", "reward / accuracy")
    steps = [h["step"] for h in history]
    _line(
        fig,
        steps,
        [h.get("reward_mean") for h in history],
        "training reward (batch mean)",
        OKABE_ITO[4],
        error_y=dict(array=[h.get("reward_std") or 0.0 for h in history], thickness=1),
    )
    _line(
        fig,
        [e["step"] for e in evaluations],
        [e.get("accuracy") for e in evaluations],
        "held-out accuracy",
        OKABE_ITO[5],
        line_dash="dash",
    )
    values = [v for t in fig.data for v in t.y if v is not None]
    if all(0.0 <= v <= 1.0 for v in values):  # 0/1 rewards and accuracies: a fixed scale
        fig.update_yaxes(range=[-0.03, 1.03])
    return fig


def loss_figure(history: list[Json]) -> go.Figure:
    """Total loss, policy loss and the KL to the starting policy per step."""
    fig = _figure("Loss", "loss")
    steps = [h["step"] for h in history]
    for key, name, color in (
        ("loss", "loss (policy + β·KL)", OKABE_ITO[0]),
        ("policy_loss", "policy loss", OKABE_ITO[2]),
        ("kl", "KL to start (k3)", OKABE_ITO[6]),
    ):
        _line(fig, steps, [h.get(key) for h in history], name, color)
    return fig


def wasted_methods(history: list[Json]) -> list[str]:
    """Methods with a wasted share in the history: entropy and gmts first."""
    seen = dict.fromkeys(m for h in history for m in (h.get("wasted_share") or {}))
    return [m for m in WASTED_FIRST if m in seen] + [m for m in seen if m not in WASTED_FIRST]


def wasted_figure(history: list[Json]) -> go.Figure:
    """Per step, the share of each method's selection that lands on zero-gradient tokens."""
    fig = _figure("Wasted share: selected tokens with zero gradient (zero-signal groups)", "share")
    steps = [h["step"] for h in history]
    for i, m in enumerate(wasted_methods(history)):
        ys = [(h.get("wasted_share") or {}).get(m) for h in history]
        _line(fig, steps, ys, m, OKABE_ITO[(i + 4) % len(OKABE_ITO)])
    fig.update_yaxes(range=[-0.02, 1.02])
    return fig


HISTORY_HEADERS = [
    "step", "method", "ratio", "lr", "reward", "loss", "KL", "grad norm", "selected",
    "grad coverage", "zero-signal groups", "wasted entropy", "wasted gmts",
    "Δlog p selected", "Δlog p others", "seconds",
]  # fmt: skip


def history_rows(history: list[Json]) -> list[list[Any]]:
    """One row per step for the history table (latest first), numbers formatted for people."""
    rows = []
    for h in reversed(history):
        wasted = h.get("wasted_share") or {}
        rows.append(
            [
                h["step"], h.get("method"), h.get("ratio"), _fmt(h.get("learning_rate"), 3),
                _fmt(h.get("reward_mean"), 3), _fmt(h.get("loss"), 3), _fmt(h.get("kl"), 3),
                _fmt(h.get("grad_norm"), 3), _fmt(h.get("selected_fraction"), 3),
                _fmt(h.get("gradient_coverage"), 3), h.get("num_zero_signal_groups"),
                _fmt(wasted.get("entropy"), 3), _fmt(wasted.get("gmts"), 3),
                _fmt(h.get("selected_logprob_change"), 3),
                _fmt(h.get("unselected_logprob_change"), 3), _fmt(h.get("seconds"), 3),
            ]
        )  # fmt: skip
    return rows


def session_markdown(info: Json | None, note: str | None = None) -> str:
    """One line about the session (its id, model, policy, steps done, last accuracy)."""
    if not info:
        return "No session yet: **Run** creates your private copy of the model."
    evals = info.get("evaluations") or []
    acc = f" · held-out accuracy {evals[-1]['accuracy']:.3f}" if evals else ""
    text = (
        f"Session `{info['session_id']}` · model `{info.get('model')}` · "
        f"{info.get('policy_kind')} policy ({info.get('trainable_parameters', 0):,} trainable "
        f"parameters) · steps done **{info.get('steps_done', 0)}**{acc}"
    )
    return f"{text}\n\n_{note}_" if note else text


@dataclass
class TrainView:
    """What the tab shows: the session's info, the last batch and a remark."""

    session_id: str | None = None
    info: Json | None = None
    last_batch: list[Json] = field(default_factory=list)
    note: str | None = None

    def values(self) -> list[Any]:
        """Values for the tab's outputs: state, status, three figures, table, batch HTML."""
        import pandas as pd

        history = (self.info or {}).get("history") or []
        evals = (self.info or {}).get("evaluations") or []
        batch = (
            render_batch_changes(self.last_batch)
            if self.last_batch
            else placeholder("Run a step to see the batch it trained on.")
        )
        return [
            self.session_id,
            session_markdown(self.info, self.note),
            reward_figure(history, evals),
            loss_figure(history),
            wasted_figure(history),
            pd.DataFrame(history_rows(history), columns=HISTORY_HEADERS),
            batch,
        ]


# --- running steps through a backend ---------------------------------------------------------


def _same_session(info: Json, form: TrainForm) -> bool:
    return (not form.model or info.get("model") == form.model) and info.get("seed") == form.seed


def ensure_session(backend: Backend, session_id: str | None, form: TrainForm) -> TrainView:
    """This tab's session: the existing one if it is alive and fits the form, else a new one."""
    note = None
    if session_id:
        try:
            info = backend.get_session(session_id)
        except SessionNotFoundError as exc:
            note = f"Your previous session is gone ({exc}); started a new one."
        else:
            if _same_session(info, form):
                return TrainView(session_id, info)
            note = "Model or seed changed: started a new session from the base model."
    info = backend.create_session(form.create_request())
    logger.info("UI created session %s", info["session_id"])
    return TrainView(info["session_id"], info, note=note)


def _evaluate(backend: Backend, view: TrainView, form: TrainForm) -> None:
    assert view.session_id is not None
    backend.evaluate_session(view.session_id, form.eval_request())
    view.info = backend.get_session(view.session_id)


def run_steps(
    backend: Backend, session_id: str | None, form: TrainForm, progress: Progress | None = None
) -> Iterator[TrainView]:
    """Run ``form.steps`` GRPO steps, one request each; yields the view after each step.

    A fresh session is evaluated first (the accuracy at step 0), and every run ends with an
    evaluation when ``form.eval_problems`` > 0.
    """
    view = ensure_session(backend, session_id, form)
    assert view.session_id is not None and view.info is not None
    total = int(form.steps)
    if form.eval_problems > 0 and not view.info.get("evaluations") and not view.info["steps_done"]:
        if progress is not None:
            progress((0, total), desc="held-out accuracy at the start")
        _evaluate(backend, view, form)
    for i in range(total):
        if progress is not None:
            progress((i, total), desc=f"GRPO step {i + 1} of {total}")
        body = backend.step_session(view.session_id, form.step_request())
        view.last_batch = body.get("last_batch") or view.last_batch
        view.info = backend.get_session(view.session_id)
        yield dataclasses.replace(view)  # a snapshot: the loop goes on changing ``view``
    if form.eval_problems > 0:
        if progress is not None:
            progress((total, total), desc="held-out accuracy")
        _evaluate(backend, view, form)
    yield dataclasses.replace(view)


def reset_session(backend: Backend, session_id: str | None) -> TrainView:
    """Back to the starting weights (the session stays; its history is cleared)."""
    if not session_id:
        return TrainView(note="Nothing to reset yet.")
    try:
        info = backend.reset_session(session_id)
    except SessionNotFoundError:
        return TrainView(note="The session had expired; the next run starts a new one.")
    return TrainView(session_id, info, note="Reset to the starting weights.")


# --- Gradio wiring ---------------------------------------------------------------------------

FORM_FIELDS = [name for name in asdict(TrainForm())]


def help_of(knob: str) -> str:
    """A GRPO knob's one line of help, as documented on RLConfig."""
    return rl_knob(knob)[0]


def _controls(ctx: Any) -> dict[str, Any]:
    import gradio as gr

    from app.ui.explore import method_choices

    models, default_model = ctx.backend.models()
    max_steps = int(ctx.capabilities["limits"]["max_session_steps"])  # the backend's limit
    c: dict[str, Any] = {}
    with gr.Row():
        c["model"] = gr.Dropdown(
            models, value=default_model, label="Model", allow_custom_value=True
        )
        c["method"] = gr.Dropdown(
            method_choices(ctx.capabilities),
            value="gmts",
            label="Selection method",
            elem_id="train-method",
        )
        c["ratio"] = gr.Slider(
            0.05, 1.0, 0.2, step=0.05, label="Ratio", info=help_of("ratio"), elem_id="train-ratio"
        )
        c["learning_rate"] = gr.Number(
            RL_DEFAULTS.learning_rate,
            label="Learning rate",
            info=help_of("learning_rate"),
            minimum=0,
            maximum=1,
            step=1e-5,
        )
    with gr.Row():
        c["group_size"] = gr.Slider(
            2, 16, 8, step=1, label="Group size G", info=help_of("group_size"), elem_id="train-g"
        )
        c["prompts_per_step"] = gr.Slider(
            1, 8, 4, step=1, label="Prompts per step", elem_id="train-prompts"
        )
        # at most the backend's limit (a slider needs two distinct ends)
        max_new = max(2, min(128, int(ctx.capabilities["limits"]["max_new_tokens"])))
        c["max_new_tokens"] = gr.Slider(
            1,
            max_new,
            min(48, max_new),
            step=1,
            label="Max new tokens",
            info=help_of("max_new_tokens"),
            elem_id="train-max-new",
        )
        c["steps"] = gr.Slider(
            1, max_steps, min(5, max_steps), step=1, label="Steps per run", elem_id="train-steps"
        )
        c["eval_problems"] = gr.Slider(
            0, 400, 100, step=10, label="Held-out problems (0: skip)", elem_id="train-eval"
        )
        c["seed"] = gr.Number(0, precision=0, label="Seed", minimum=0)
    return {name: c[name] for name in FORM_FIELDS}


def _outputs() -> list[Any]:
    import gradio as gr

    status = gr.Markdown(session_markdown(None), elem_id="train-session")
    with gr.Row():
        reward = gr.Plot(label="Reward", elem_id="train-reward-plot", min_width=300)
        loss = gr.Plot(label="Loss", elem_id="train-loss-plot", min_width=300)
    wasted = gr.Plot(label="Wasted share", elem_id="train-wasted-plot")
    gr.Markdown("#### The last batch: selected tokens and their log-prob change")
    batch = gr.HTML(
        placeholder("Run a step to see the batch it trained on."), elem_id="train-batch"
    )
    table = gr.Dataframe(
        headers=HISTORY_HEADERS, label="Step history", interactive=False, elem_id="train-history"
    )
    return [status, reward, loss, wasted, table, batch]


def build_train_tab(ctx: Any) -> None:
    """Train: knobs, Run N steps (with progress), Reset, curves, history, the last batch."""
    import gradio as gr

    from app.ui.blocks import _call

    gr.Markdown(
        "Live GRPO on **your own copy** of the model (the base model is never changed). Each "
        "step samples G answers for demo-task prompts, rewards them, and trains on the tokens "
        "the method selects. Same seed, same batches: reset, switch the method and compare."
    )
    form = _controls(ctx)
    with gr.Row():
        run_btn = gr.Button("Run steps", variant="primary", elem_id="train-run-btn")
        reset_btn = gr.Button("Reset to the start", elem_id="train-reset-btn")
    session = gr.State(None)  # this browser tab's session id, created on the first run
    outputs = [session, *_outputs()]

    def run(session_id: str | None, *values: Any, progress: Any = gr.Progress()) -> Iterator[Any]:
        f = TrainForm(**dict(zip(FORM_FIELDS, values, strict=True)))
        steps = run_steps(ctx.backend, session_id, f, progress)
        while (view := _call(lambda: next(steps, None))) is not None:
            yield view.values()

    run_btn.click(run, [session, *form.values()], outputs)
    reset_btn.click(
        lambda sid: _call(lambda: reset_session(ctx.backend, sid)).values(), [session], outputs
    )
