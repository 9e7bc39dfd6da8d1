"""The Train tab without a browser: figures and tables from a step history, the step loop over
a real local backend (tiny random model), and the last-batch renderer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.schemas.sessions import SessionCreateRequest, SessionStepRequest
from app.services.errors import SessionNotFoundError
from app.services.responses import as_json, step_metrics_out
from app.services.train_gain import evaluation_gain
from app.ui.client import BackendError
from app.ui.local_backend import LocalBackend
from app.ui.remote_backend import RemoteBackend
from app.ui.tabs.train import changes as render_changes
from app.ui.tabs.train import charts as train_charts
from app.ui.tabs.train import earlier_runs as train_runs
from app.ui.tabs.train import view as train
from gmts_core.grpo.records import StepMetrics
from tests.app.api_helpers import TINY, LiveServer, given_body, make_settings

EVIL = '<script>window.__pwned=1</script><img src=x onerror="x">'


def metrics(step: int, reward: float, wasted_entropy: float, method: str = "gmts") -> dict:
    """A step's metrics in their real JSON form (as the sessions API returns them)."""
    return as_json(step_metrics_out(StepMetrics(
        step=step, method=method, ratio=0.2, learning_rate=1e-3, loss=0.1 * step,
        policy_loss=0.05 * step, kl=0.01 * step, grad_norm=1.0, clip_low_fraction=0.0,
        clip_high_fraction=0.0, selected_fraction=0.2, gradient_coverage=0.9,
        reward_mean=reward, reward_std=0.5, num_prompts=2, num_answers=8, num_tokens=100,
        num_zero_signal_groups=1, wasted_share={method: 0.0, "entropy": wasted_entropy},
        selected_logprob_change=0.02, unselected_logprob_change=-0.001, seconds=0.5,
    )))  # fmt: skip


HISTORY = [metrics(1, 0.25, 0.4), metrics(2, 0.5, 0.3), metrics(3, 0.75, 0.1)]
EVALS = [{"step": 0, "accuracy": 0.3}, {"step": 3, "accuracy": 0.45}]


def test_reward_figure_has_one_point_per_step_and_evaluation() -> None:
    fig = train_charts.reward_figure(HISTORY, EVALS)
    accuracy, smooth, reward, start = fig.data
    assert list(start.y) == [0.3, 0.3]  # the starting accuracy as a line
    assert list(reward.x) == [1, 2, 3] and list(reward.y) == [0.25, 0.5, 0.75]
    assert reward.error_y.array is None  # no +-std bars swamping the chart
    assert list(smooth.y) == pytest.approx([0.25, 0.375, 0.5])
    assert list(accuracy.x) == [0, 3] and list(accuracy.y) == [0.3, 0.45]
    empty = train_charts.reward_figure([], [])
    assert [len(t.x) for t in empty.data] == [0, 0, 0]


def test_loss_figure_plots_loss_policy_loss_and_kl() -> None:
    fig = train_charts.loss_figure(HISTORY)
    by_name = {t.name.split(" ")[0]: list(t.y) for t in fig.data}
    assert by_name["loss"] == pytest.approx([0.1, 0.2, 0.3])
    assert by_name["policy"] == pytest.approx([0.05, 0.1, 0.15])
    assert by_name["KL"] == pytest.approx([0.01, 0.02, 0.03])


def test_wasted_figure_puts_entropy_then_gmts_then_others() -> None:
    history = [*HISTORY, metrics(4, 1.0, 0.9, method="random")]
    assert train_charts.wasted_methods(history) == ["entropy", "gmts", "random"]
    fig = train_charts.wasted_figure(history)
    entropy, gmts, random_ = fig.data
    assert list(entropy.y) == [0.4, 0.3, 0.1, 0.9]
    assert list(gmts.y) == [0.0, 0.0, 0.0, None]  # step 4 trained with random: no gmts number
    assert list(random_.x) == [1, 2, 3, 4] and list(random_.y)[-1] == 0.0


def test_history_rows_latest_first_and_aligned_with_headers() -> None:
    rows = train.history_rows(HISTORY)
    assert [r[0] for r in rows] == [3, 2, 1]
    assert all(len(r) == len(train.HISTORY_HEADERS) for r in rows)
    row = dict(zip(train.HISTORY_HEADERS, rows[0], strict=True))
    assert row["reward"] == "0.75" and row["wasted entropy"] == "0.1" and row["wasted gmts"] == "0"


def test_session_markdown_names_the_session_and_accuracy() -> None:
    assert "Run" in train.session_markdown(None)
    info = {
        "session_id": "abc123", "model": "tiny-arith", "policy_kind": "full",
        "trainable_parameters": 1234, "steps_done": 3, "evaluations": EVALS,
    }  # fmt: skip
    text = train.session_markdown(info, "a note")
    assert "`abc123`" in text and "**3**" in text and "0.450" in text and "_a note_" in text


def test_form_requests_are_valid_api_bodies() -> None:
    f = train.TrainForm(model="tiny-arith", method="entropy", ratio=0.3, group_size=4, seed=7)
    create = SessionCreateRequest.model_validate(f.create_request())
    assert create.method == "entropy" and create.seed == 7 and create.group_size == 4
    step = SessionStepRequest.model_validate(f.step_request())
    assert step.steps == 1 and step.ratio == 0.3 and step.include_tokens
    assert step.measure_logprob_after is True  # the tab shows each token's log-prob change
    # of the prompts it draws only: the pass after the update runs on their answers
    assert step.logprob_after_prompts == render_changes.MAX_CHANGE_GROUPS
    shown = f"first {render_changes.MAX_CHANGE_GROUPS} prompts"
    assert shown in train.DELTA_LOGP_NOTE  # what the history's Δlog p columns cover
    docs = Path(__file__).resolve().parents[5] / "docs" / "live-rl.md"
    assert shown in " ".join(docs.read_text(encoding="utf-8").split())


def test_view_values_order_matches_the_outputs() -> None:
    info = {"session_id": "s", "steps_done": 3, "history": HISTORY, "evaluations": EVALS}
    earlier = [train_runs.snapshot(info, 1)]
    values = train.TrainView("s", info, earlier=earlier, learning_rate=0.01).values()
    sid, status, reward, loss, wasted, table, batch, runs = values
    assert sid == "s" and "`s`" in status and "above 0.0002" in status  # the lr warning
    assert len(reward.data[2].x) == 3 and table.count("<th scope='row'>") == 3
    assert len(reward.data) == 6  # the current run's three traces and start line, the earlier two
    assert "Run a step" in batch and runs == earlier


def test_mid_run_values_send_only_what_moves() -> None:
    """Mid-run: status and reward chart every step, loss and wasted share every 5 steps, the
    table and batch left as shown until the run's last view."""
    five = [metrics(s, 0.5, 0.2) for s in range(1, 6)]
    for history, charts in ((HISTORY, False), (five, True)):
        info = {"session_id": "s", "steps_done": len(history), "history": history,
                "evaluations": EVALS}  # fmt: skip
        live = train.TrainView("s", info, final=False).values()
        assert live[2] is not train.SKIP and len(live[2].data[2].x) == len(history)
        assert (live[3] is train.SKIP, live[4] is train.SKIP) == (not charts, not charts)
        assert live[5] is train.SKIP and live[6] is train.SKIP
    assert all(v is not train.SKIP for v in train.TrainView("s", info).values())  # all at the end


# --- the last batch -------------------------------------------------------------------------


def test_batch_changes_mark_selected_tokens_and_shade_by_change() -> None:
    answers = [
        {
            "group": 0, "index": 0, "prompt": f"Q {EVIL}", "text": "ab", "reward": 1.0,
            "advantage": 0.8,
            "tokens": [
                {"position": 0, "id": 1, "text": "a", "selected": True, "logprob_before": -1.0,
                 "logprob_after": -0.5, "logprob_change": 0.5},
                {"position": 1, "id": 2, "text": EVIL, "selected": False, "logprob_before": -1.0,
                 "logprob_after": -1.25, "logprob_change": -0.25},
            ],
        }
    ]  # fmt: skip
    html = render_changes.render_batch_changes(answers)
    assert "<script>" not in html and "&lt;script&gt;" in html
    spans = re.findall(r'<span class="(tok[^"]*)" style="([^"]*)"', html)
    assert [c for c, _ in spans] == ["tok sel-a mark-a", "tok"]
    # the largest change: full shade
    assert f"rgba({render_changes.CHANGE_UP},0.860)" in spans[0][1]
    assert f"rgba({render_changes.CHANGE_DOWN},0.460)" in spans[1][1]  # half as large, other colour
    assert "selected <b>0.5</b>" in html and "others −0.25" in html
    assert "Run a step" in render_changes.render_batch_changes([])
    assert "no learning signal" not in html
    flat = {**answers[0], "group": 1, "advantage": 0.0}
    two_groups = render_changes.render_batch_changes([answers[0], flat])
    assert two_groups.count('class="prompt"') == 2
    assert two_groups.count("no learning signal") == 1  # only group 1 has equal rewards


# --- the step loop over a real local backend ------------------------------------------------


@pytest.fixture(scope="module")
def backend(model_root: Path) -> Iterator[LocalBackend]:
    app = create_app(make_settings(model_root, max_new_tokens=8, max_answers=8))
    with TestClient(app):
        yield LocalBackend(app.state.services)


FORM = train.TrainForm(
    model=TINY, group_size=4, prompts_per_step=1, max_new_tokens=6, steps=2, eval_problems=3,
    inner_steps=2,  # two updates a step: the stage lines below count both
)  # fmt: skip


class Recorder:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, progress: Any, desc: str = "") -> None:
        self.calls.append((progress, desc))


def test_run_steps_yields_after_every_step_and_evaluates(backend: LocalBackend) -> None:
    progress = Recorder()
    views = list(train.run_steps(backend, None, FORM, progress))
    sid = views[0].session_id
    assert sid and all(v.session_id == sid for v in views)
    # the session at once (its status right from the start), each step, then the evaluation
    assert [len(v.info["history"]) for v in views] == [0, 1, 2, 2]
    assert "Running 2 steps" in (views[0].note or "") and not views[0].final
    steps_seen = [v.info["steps_done"] for v in views]
    assert steps_seen[:3] == [0, 1, 2] and steps_seen[-1] == 2
    assert [e["step"] for e in views[-1].info["evaluations"]] == [0, 2]  # start and end
    assert views[-1].last_batch and views[-1].last_batch[0]["tokens"]
    assert [p for p, _ in progress.calls][:2] == [(0, 2), (0, 2)]
    assert views[-1].earlier == []  # start evaluation, step 1
    # each step's place in the queue and stages are said as they happen, in order
    step1 = [d for _, d in progress.calls if d.startswith("step 1 of 2: ")]
    assert step1[1:5] == [
        "step 1 of 2: running",
        "step 1 of 2: generating answers (1 of 7)",
        "step 1 of 2: scoring rewards (2 of 7)",
        "step 1 of 2: token statistics (3 of 7)",
    ]
    assert step1[-1] == "step 1 of 2: log-prob after (7 of 7)"  # 2 updates before it

    # the same tab's next run continues its session
    more = list(train.run_steps(backend, sid, FORM))
    assert more[-1].session_id == sid and more[-1].info["steps_done"] == 4

    reset = train.reset_session(backend, sid)
    assert reset.info["steps_done"] == 0 and reset.info["history"] == []
    assert len(reset.earlier) == 1 and reset.earlier[0]["steps"] == [1, 2, 3, 4]  # kept, faded
    assert "faded" in (reset.note or "")


def test_switching_the_method_keeps_the_run_and_starts_again(backend: LocalBackend) -> None:
    first = list(train.run_steps(backend, None, FORM))[-1]
    entropy = train.TrainForm(**{**FORM.__dict__, "method": "entropy", "steps": 1})
    views = list(train.run_steps(backend, first.session_id, entropy, earlier=first.earlier))
    last = views[-1]
    assert last.session_id == first.session_id and last.info["steps_done"] == 1  # from the start
    assert [h["method"] for h in last.info["history"]] == ["entropy"]
    assert [r["method"] for r in last.earlier] == ["gmts"] and "Method changed" in (last.note or "")
    again = list(train.run_steps(backend, last.session_id, entropy, earlier=last.earlier))[-1]
    assert again.info["steps_done"] == 2 and len(again.earlier) == 1  # same method: continues


def test_a_new_model_or_a_lost_session_starts_a_new_one(backend: LocalBackend) -> None:
    first = list(train.run_steps(backend, None, FORM))[-1]
    other_seed = train.TrainForm(**{**FORM.__dict__, "seed": 1})
    view = train.ensure_session(backend, first.session_id, other_seed)
    assert view.session_id != first.session_id and "new session" in (view.note or "")
    backend.services.sessions.delete(view.session_id)
    again = train.ensure_session(backend, view.session_id, other_seed)
    assert again.session_id not in (view.session_id, None) and "gone" in (again.note or "")
    gone = train.reset_session(backend, view.session_id)
    assert gone.session_id is None and "expired" in (gone.note or "")


def test_remote_backend_drives_sessions_and_gradcheck_over_http(model_root: Path) -> None:
    """The same Train loop against a real server's /v1 API (the UI's remote mode)."""
    app = create_app(make_settings(model_root, max_new_tokens=8, max_answers=8))
    with LiveServer(app) as server:
        remote = RemoteBackend(server.url)
        views = list(train.run_steps(remote, None, FORM))
        sid = views[-1].session_id
        assert [len(v.info["history"]) for v in views] == [0, 1, 2, 2]
        assert app.state.services.sessions.info(sid).steps_done == 2  # the server's session
        assert train.reset_session(remote, sid).info["steps_done"] == 0
        app.state.services.sessions.delete(sid)
        with pytest.raises(SessionNotFoundError):  # mapped back from the 404, so the tab recovers
            remote.get_session(sid)
        assert "gone" in (train.ensure_session(remote, sid, FORM).note or "")
        body = remote.gradcheck(given_body(max_tokens=64))
        assert body.fidelity.num_tokens == body.summary.num_tokens
        with pytest.raises(BackendError, match="local backend"):
            remote.compare(None, None)


def test_held_out_accuracy_every_few_steps() -> None:
    form = train.TrainForm(steps=12, eval_every=5, eval_problems=64)
    assert form.eval_steps() == {5, 10, 12}  # and the start, measured before step 1
    assert train.TrainForm(steps=12, eval_problems=0).eval_steps() == set()


def test_reset_says_no_learning_rate_warning(backend: LocalBackend) -> None:
    """After Reset the form's rate is not known: no "Learning rate 0 is below ..." warning."""
    first = list(train.run_steps(backend, None, FORM))[-1]
    reset = train.reset_session(backend, first.session_id)
    assert "Learning rate" not in reset.status()
    assert "Learning rate" in train.TrainView(learning_rate=0.0).status()


def test_reward_chart_points_and_moving_average() -> None:
    from app.ui.tabs.train.charts import reward_figure
    from app.ui.tabs.train.earlier_runs import moving_average

    assert moving_average([1.0, 0.0, 1.0, None, 0.0], window=2) == [1.0, 0.5, 0.5, 1.0, 0.0]
    history = [{"step": i, "reward_mean": (i % 2) * 1.0, "method": "gmts"} for i in range(1, 11)]
    evals = [{"step": s, "accuracy": 0.5 + s / 100} for s in (0, 5, 10)]
    fig = reward_figure(history, evals)
    acc, smooth, raw = fig.data[:3]
    assert acc.mode == "markers" and list(acc.x) == [0, 5, 10]  # measured points, no line
    assert smooth.mode == "lines" and smooth.y[-1] == pytest.approx(0.4)
    assert raw.mode == "markers" and raw.marker.opacity < 0.5
    assert all(getattr(t, "error_y", None) is None or t.error_y.array is None for t in fig.data)


def test_reward_figure_draws_the_start_line_and_the_paired_gain() -> None:
    before = [1.0] * 90 + [0.0] * 110
    after = [1.0] * 115 + [0.0] * 85
    evals = [
        {"step": 0, "accuracy": 0.45, "per_problem": before},
        {"step": 3, "accuracy": 0.575, "per_problem": after},
    ]
    fig = train_charts.reward_figure(HISTORY, evals)
    start = [t for t in fig.data if t.name.startswith("start: held-out accuracy")]
    assert len(start) == 1 and set(start[0].y) == {0.45}
    assert min(start[0].x) == 0 and max(start[0].x) == 3  # across the whole run
    (label,) = [a.text for a in fig.layout.annotations]
    gain = evaluation_gain(evals)
    assert gain is not None and gain.low > 0
    assert label.startswith("gain +12.5 points")
    assert f"[{100 * gain.low:+.1f}, {100 * gain.high:+.1f}]" in label and "200 problems" in label
    assert "this run" in label  # what the interval covers: these weights, not the recipe


def test_no_gain_label_without_paired_problems() -> None:
    fig = train_charts.reward_figure(HISTORY, EVALS)  # bodies without per_problem
    assert not fig.layout.annotations
    assert any(t.name.startswith("start: held-out accuracy 0.300") for t in fig.data)
    one = train_charts.reward_figure(HISTORY, EVALS[:1])
    assert not one.layout.annotations
