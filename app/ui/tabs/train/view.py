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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.schemas.sessions import SessionOut
from app.services.errors import SessionNotFoundError
from app.services.responses import as_json
from app.ui import status
from app.ui.client import Backend
from app.ui.render import Json, fmt, placeholder
from app.ui.tables import card_table
from app.ui.tabs.train import earlier_runs as train_runs
from app.ui.tabs.train.changes import MAX_CHANGE_GROUPS, render_batch_changes
from app.ui.tabs.train.charts import loss_figure, reward_figure, wasted_figure
from gmts_core.config import CLASS_RECIPE

logger = logging.getLogger(__name__)

Progress = Callable[..., Any]  # gr.Progress-like: progress((done, total), desc=...)


# The tab's defaults: a small-batch version of the demo recipe that visibly learns in one run
# of 30 steps on 2 CPU cores (benchmarks/train_tab.py measures it: see docs/benchmarks.md;
# 20 steps gained 11.5-16 points over seeds 0-4, 30 steps 8.5-17.5 over seeds 0-9 (10th
# percentile 10.3), every interval above 0).
# 32 prompts x 1 update costs about what 16 x 2 did and averages the ±1-slip noise over twice
# the prompts (docs/live-rl.md): seed 0 went 0.475 -> 0.590 instead of 0.580 with greedy
# accuracy holding (0.925 -> 0.945, against 0.925 -> 0.89).
TRAIN_RECIPE = CLASS_RECIPE


SKIP = object()  # an output left as it is shown (the tab sends ``gr.skip()``)
LIVE_CHARTS_EVERY = 5  # mid-run, the loss and wasted-share charts move every this many steps


@dataclass
class TrainForm:
    """The Train tab's controls. Knobs apply to every step request; model and seed to the
    session (changing either starts a new session)."""

    model: str | None = None
    method: str = "gmts"
    ratio: float = TRAIN_RECIPE.ratio
    learning_rate: float = TRAIN_RECIPE.learning_rate
    group_size: int = TRAIN_RECIPE.group_size
    prompts_per_step: int = TRAIN_RECIPE.prompts_per_step
    max_new_tokens: int = 48
    steps: int = 30
    # held-out accuracy on this fixed set of problems (seeded) at the start, every
    # ``eval_every`` steps and at the end (0: no evaluation): a few points a run, drawn as points;
    # 200 problems (about 0.3 s each on 2 cores) so the gain's paired interval is a few points
    eval_problems: int = 200
    eval_every: int = 5
    seed: int = 0
    inner_steps: int = TRAIN_RECIPE.inner_steps
    warmup_steps: int = TRAIN_RECIPE.warmup_steps

    def knobs(self) -> Json:
        return {
            "method": self.method,
            "ratio": float(self.ratio),
            "learning_rate": float(self.learning_rate),
            "group_size": int(self.group_size),
            "prompts_per_step": int(self.prompts_per_step),
            "max_new_tokens": int(self.max_new_tokens),
            "inner_steps": int(self.inner_steps),
            "warmup_steps": int(self.warmup_steps),
        }

    def create_request(self) -> Json:
        """Body of ``POST /v1/sessions``."""
        return {"model": self.model or None, "seed": int(self.seed), **self.knobs()}

    def step_request(self, include_tokens: bool = True) -> Json:
        """Body of one ``POST /v1/sessions/{id}/step`` (one step, demo-task batch)."""
        # the Train tab shows the log-prob change of the tokens of the prompts it draws (the
        # batch view's first MAX_CHANGE_GROUPS) and the history's means over them: the pass
        # after the update runs on those prompts' answers only
        return {
            "steps": 1,
            "include_tokens": include_tokens,
            "measure_logprob_after": True,
            "logprob_after_prompts": MAX_CHANGE_GROUPS,
            **self.knobs(),
        }

    def eval_steps(self) -> set[int]:
        """The steps of a run after which held-out accuracy is measured (its last included)."""
        if self.eval_problems <= 0:
            return set()
        every = max(1, int(self.eval_every))
        return {*range(every, int(self.steps), every), int(self.steps)}

    def eval_request(self) -> Json:
        return {"num_problems": int(self.eval_problems), "seed": int(self.seed)}


# --- tables from a session's history ---------------------------------------------------------


HISTORY_HEADERS = [
    "step", "method", "ratio", "lr", "reward", "loss", "KL", "grad norm", "selected",
    "grad coverage", "zero-signal groups", "wasted entropy", "wasted gmts",
    "Δlog p selected", "Δlog p others", "seconds",
]  # fmt: skip

DELTA_LOGP_NOTE = (
    "**Δlog p selected / others**: the mean change of log π over the selected (trained) tokens "
    f"of the step's first {MAX_CHANGE_GROUPS} prompts (the ones drawn under *The last batch*), "
    "and over their other tokens, from before the update to after it (same tokens, same "
    "context; the other prompts' tokens are trained but not measured after the update). Each "
    "trained token moves in the direction of its answer's advantage: up where "
    "A > 0, down where A < 0, so the mean's sign says which side those prompts lean to (it is "
    "often negative: wrong answers are more numerous and longer), not whether learning works. "
    "Held-out accuracy, the points on the chart, says that."
)


def history_rows(history: list[Json]) -> list[list[Any]]:
    """One row per step for the history table (latest first), numbers formatted for people."""
    rows = []
    for h in reversed(history):
        wasted = h.get("wasted_share") or {}
        rows.append(
            [
                h["step"], h.get("method"), h.get("ratio"), fmt(h.get("learning_rate"), 3),
                fmt(h.get("reward_mean"), 3), fmt(h.get("loss"), 3), fmt(h.get("kl"), 3),
                fmt(h.get("grad_norm"), 3), fmt(h.get("selected_fraction"), 3),
                fmt(h.get("gradient_coverage"), 3), h.get("num_zero_signal_groups"),
                fmt(wasted.get("entropy"), 3), fmt(wasted.get("gmts"), 3),
                fmt(h.get("selected_logprob_change"), 3),
                fmt(h.get("unselected_logprob_change"), 3), fmt(h.get("seconds"), 3),
            ]
        )  # fmt: skip
    return rows


def session_markdown(info: Json | None, note: str | None = None) -> str:
    """One line about the session (its id, model, policy, steps done, last accuracy)."""
    if not info:
        text = "No session yet: **Run** creates your private copy of the model."
        return f"{text}\n\n_{note}_" if note else text
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
    earlier: list[Json] = field(default_factory=list)  # faded runs (app.ui.tabs.train.earlier_runs)
    learning_rate: float | None = None  # the form's, for the warning
    final: bool = True  # False while a run is going: the tab then updates only the curves

    def status(self) -> str:
        """The session line, the remark, at the end of a run its verdict sentence, and any
        warning in plain words, mid-run too (the learning-rate warning only when the form's
        rate is known: a Reset does not read the form)."""
        lr = self.learning_rate
        warns = train_runs.warnings(lr, self.info)
        text = session_markdown(self.info, self.note)
        verdict = train_runs.run_verdict(self.info) if self.final else None
        text += f"\n\n{verdict}" if verdict else ""
        paired = train_runs.difference_to_earlier(self.info, self.earlier) if self.final else None
        text += f"\n\n{paired}" if paired else ""
        return text + "".join(f"\n\n**⚠ {w}**" for w in warns)

    def values(self) -> list[Any]:
        """Values for the tab's outputs: state, status, three figures, table, batch HTML, and
        the earlier runs' state. Mid-run (``final`` false) only what moves is built: the
        status and the reward chart after every step, the loss and wasted-share charts every
        ``LIVE_CHARTS_EVERY`` steps; the rest is :data:`SKIP` (left as shown) until the end.
        Each update costs the browser a redraw on the machine's same cores as the training."""
        history = (self.info or {}).get("history") or []
        evals = (self.info or {}).get("evaluations") or []
        if not self.final:
            charts = len(history) % LIVE_CHARTS_EVERY == 0
            return [
                self.session_id,
                self.status(),
                reward_figure(history, evals, self.earlier),
                loss_figure(history) if charts else SKIP,
                wasted_figure(history) if charts else SKIP,
                SKIP,
                SKIP,
                self.earlier,
            ]
        batch = (
            render_batch_changes(
                self.last_batch, method=history[-1].get("method") if history else None
            )
            if self.last_batch
            else placeholder("Run a step to see the batch it trained on.")
        )
        return [
            self.session_id,
            self.status(),
            reward_figure(history, evals, self.earlier),
            loss_figure(history),
            wasted_figure(history),
            card_table(HISTORY_HEADERS, history_rows(history), "step history"),
            batch,
            self.earlier,
        ]


# --- running steps through a backend ---------------------------------------------------------


def _same_session(info: SessionOut, form: TrainForm) -> bool:
    return (not form.model or info.model == form.model) and info.seed == form.seed


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
                return TrainView(session_id, as_json(info))
            note = "Model or seed changed: started a new session from the base model."
    created = backend.create_session(form.create_request())
    logger.info("UI created session %s", created.session_id)
    return TrainView(created.session_id, as_json(created), note=note)


def _evaluate(backend: Backend, view: TrainView, form: TrainForm) -> None:
    assert view.session_id is not None
    backend.evaluate_session(view.session_id, form.eval_request())
    view.info = as_json(backend.get_session(view.session_id))


def _switch_method(backend: Backend, view: TrainView, form: TrainForm) -> None:
    """A new method after steps of another: keep the run faded and start again from the base
    weights, so the two methods' curves start from the same point."""
    history = (view.info or {}).get("history") or []
    if not history or history[-1].get("method") == form.method or view.session_id is None:
        return
    view.earlier = train_runs.keep(view.earlier, view.info)
    view.info = as_json(backend.reset_session(view.session_id))
    view.note = (
        f"Method changed to {form.method}: the {history[-1].get('method')} run is kept faded "
        "on the chart, and this run starts again from the starting weights."
    )


def _step_line(progress: Progress, i: int, total: int) -> status.Show:
    """Step ``i``'s live lines on the overall bar (a stage moves it within the step)."""
    return lambda text, done: progress((i + (done or 0.0)) / total, desc=text)


def run_steps(
    backend: Backend,
    session_id: str | None,
    form: TrainForm,
    progress: Progress | None = None,
    earlier: Sequence[Json] = (),
) -> Iterator[TrainView]:
    """Run ``form.steps`` GRPO steps, one request each; yields the view after each step.

    A fresh session is evaluated first (the accuracy at step 0), and every run ends with an
    evaluation when ``form.eval_problems`` > 0. ``earlier`` runs are drawn faded; switching the
    method adds the current run to them and resets the session first.
    """
    view = ensure_session(backend, session_id, form)
    view.earlier, view.learning_rate = list(earlier), float(form.learning_rate)
    _switch_method(backend, view, form)
    assert view.session_id is not None and view.info is not None
    total = int(form.steps)
    evals = form.eval_steps()
    if form.eval_problems > 0 and not view.info.get("evaluations") and not view.info["steps_done"]:
        running = dataclasses.replace(view, final=False, note=_running_note(view, form))
        yield running  # the status is right from the first second: the session exists
        if progress is not None:
            progress((0, total), desc="measuring held-out accuracy at the start (step 0)")
        _evaluate(backend, view, form)
    for i in range(total):
        if progress is not None:
            load = status.job_load(backend)
            progress((i, total), desc=status.step_text(load, i, total, form.knobs()))
        last = i == total - 1  # only the last step's batch is shown: fetch its tokens only
        live = None
        if progress is not None:
            live = status.LiveStatus(_step_line(progress, i, total), f"step {i + 1} of {total}: ")
        body = backend.step_session(view.session_id, form.step_request(include_tokens=last), live)
        view.last_batch = as_json(body).get("last_batch") or view.last_batch
        view.info = as_json(backend.get_session(view.session_id))
        if i + 1 in evals and not last:
            if progress is not None:
                progress((i + 1, total), desc=f"held-out accuracy after step {i + 1}")
            _evaluate(backend, view, form)
        yield dataclasses.replace(view, final=False)  # a snapshot; ``view`` keeps changing
    if total in evals:
        if progress is not None:
            progress((total, total), desc="held-out accuracy at the end")
        _evaluate(backend, view, form)
    yield dataclasses.replace(view)


def _running_note(view: TrainView, form: TrainForm) -> str:
    return (
        f"Running {form.steps} steps of {form.method}: held-out accuracy on "
        f"{form.eval_problems} problems at the start, every {form.eval_every} steps and at "
        "the end."
    )


def reset_session(
    backend: Backend, session_id: str | None, earlier: Sequence[Json] = ()
) -> TrainView:
    """Back to the starting weights (the session stays; its history is cleared). The run so
    far joins the faded ``earlier`` runs."""
    earlier = list(earlier)
    if not session_id:
        return TrainView(note="Nothing to reset yet.", earlier=earlier)
    try:
        kept = train_runs.keep(earlier, as_json(backend.get_session(session_id)))
        info = as_json(backend.reset_session(session_id))
    except SessionNotFoundError:
        return TrainView(
            note="The session had expired; the next run starts a new one.", earlier=earlier
        )
    note = "Reset to the starting weights" + (
        "; the last run stays on the chart, faded." if len(kept) > len(earlier) else "."
    )
    return TrainView(session_id, info, note=note, earlier=kept)
