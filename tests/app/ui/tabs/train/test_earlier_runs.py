"""Faded earlier runs and plain warnings of the Train tab (app.ui.tabs.train.earlier_runs),
no Gradio."""

from __future__ import annotations

import plotly.graph_objects as go

from app import palette
from app.ui.limited import LR_CONTROL_MAX, SANE_LR
from app.ui.tabs.train import earlier_runs as train_runs
from app.ui.tabs.train import view as train


def info(method: str, accuracies: list[float], steps: int = 3, lr: float = 1.5e-4) -> dict:
    history = [
        {"step": s, "method": method, "reward_mean": 0.1 * s, "learning_rate": lr}
        for s in range(1, steps + 1)
    ]
    evals = [{"step": i * steps, "accuracy": a} for i, a in enumerate(accuracies)]
    return {"history": history, "evaluations": evals}


def test_snapshot_keeps_curves_and_names_the_run() -> None:
    run = train_runs.snapshot(info("entropy", [0.4, 0.5]), 2)
    assert run is not None
    assert run["label"] == "run 2: entropy, lr 0.00015" and run["method"] == "entropy"
    assert run["steps"] == [1, 2, 3] and run["reward"] == [0.1, 0.2, 0.1 * 3]
    assert run["eval_steps"] == [0, 3] and run["accuracy"] == [0.4, 0.5]
    assert train_runs.snapshot({"history": []}, 1) is None
    assert train_runs.keep([], {"history": []}) == []


def test_keep_is_bounded_and_newest_last() -> None:
    earlier: list[dict] = []
    for i in range(train_runs.MAX_EARLIER + 2):
        earlier = train_runs.keep(earlier, info("gmts" if i % 2 else "entropy", [0.4]))
    assert len(earlier) == train_runs.MAX_EARLIER
    assert [r["number"] for r in earlier] == list(range(3, train_runs.MAX_EARLIER + 3))


def test_overlays_are_faded_in_the_methods_colour() -> None:
    fig = go.Figure()
    train_runs.add_overlays(fig, [train_runs.snapshot(info("entropy", [0.4, 0.5]), 1)])
    reward, acc = fig.data
    faded = palette.rgba(palette.method_color("entropy"), 0.6)
    assert reward.line.color == faded and acc.marker.color == faded
    assert acc.mode == "markers"  # measured points, not a line between two
    assert list(acc.y) == [0.4, 0.5] and "run 1" in reward.name


def test_warnings_in_plain_words() -> None:
    assert train_runs.warnings(1.5e-4, info("gmts", [0.45, 0.52])) == []
    high = train_runs.warnings(1.0, None)
    assert len(high) == 1 and "above 0.0002" in high[0]
    assert "below" in train_runs.warnings(1e-8, None)[0]
    collapsed = train_runs.warnings(1.5e-4, info("gmts", [0.45, 0.0]))
    assert len(collapsed) == 1 and "collapsed: 0.45 → 0.00" in collapsed[0]
    assert train_runs.collapse_warning(info("gmts", [0.45, 0.30])) is None  # a dip, not collapse


def test_tab_defaults_are_the_small_batch_recipe() -> None:
    form = train.TrainForm()
    knobs = form.knobs()
    assert (form.prompts_per_step, form.group_size, form.steps) == (32, 8, 30)
    from app.core.config import Settings

    assert form.steps <= Settings().max_session_steps  # the tab's slider reaches its default
    assert knobs["learning_rate"] == 1.5e-4 and knobs["inner_steps"] == 1
    assert form.eval_problems == 200  # the gain's paired interval needs enough problems
    lo, hi = SANE_LR
    assert lo <= form.learning_rate <= hi <= LR_CONTROL_MAX
    assert knobs["warmup_steps"] == 5


def test_last_batch_view_draws_the_first_prompts_only() -> None:
    from app.ui.tabs.train.changes import render_batch_changes

    answers = [
        {"group": g, "index": i, "prompt": f"Q{g}", "reward": 1.0 * i, "advantage": i - 0.5,
         "tokens": [{"position": 0, "text": "x", "selected": True, "logprob_change": 0.1}]}
        for g in range(6) for i in range(2)
    ]  # fmt: skip
    html = render_batch_changes(answers, max_groups=4)
    assert html.count('class="answer"') == 8 and "first 4 of the batch's 6 prompts" in html
    assert "first" not in render_batch_changes(answers[:8], max_groups=4)


def _evals(before: list[float], after: list[float]) -> list[dict]:
    return [
        {"step": 0, "accuracy": sum(before) / len(before), "per_problem": before},
        {"step": 5, "accuracy": sum(after) / len(after), "per_problem": after},
    ]


def test_a_significant_fall_warns_mid_run_and_a_dip_does_not() -> None:
    before = [1.0] * 95 + [0.0] * 105  # 0.475 on 200 problems
    fell = [0.0] * 21 + before[21:]  # 21 problems lost: -10.5 points, beyond the noise
    run = {"history": [{"step": 5, "method": "gmts"}], "evaluations": _evals(before, fell)}
    warns = train_runs.warnings(1.5e-4, run)
    assert len(warns) == 1 and "Held-out accuracy is falling: \u221210.5 points" in warns[0]
    assert "this run" in warns[0]
    dip = [0.0] * 2 + before[2:]  # 2 problems: within the paired interval
    assert train_runs.decline_warning({"evaluations": _evals(before, dip)}) is None


def test_kl_warns_on_its_recent_median_not_on_one_outlier() -> None:
    def run(kls: list[float]) -> dict:
        return {"history": [{"step": i + 1, "kl": k} for i, k in enumerate(kls)]}

    assert train_runs.kl_warning(run([80.0, 0.1, 0.1, 0.2, 0.1])) is None  # one outlying step
    hot = train_runs.kl_warning(run([0.1, 2.0, 20.0, 30.0, 40.0, 25.0]))
    assert hot is not None and "KL to the start 25.00" in hot
    assert train_runs.kl_warning(run([5.0] * (train_runs.KL_WINDOW - 1))) is None  # too early


def test_the_end_of_a_run_has_a_verdict_that_follows_its_interval() -> None:
    before = [1.0] * 95 + [0.0] * 105
    gained = [1.0] * 125 + [0.0] * 75  # 30 more problems right
    text = train_runs.run_verdict({"evaluations": _evals(before, gained)})
    assert text is not None and "a gain beyond the evaluation's noise" in text
    assert "not the recipe" in text
    same = train_runs.run_verdict({"evaluations": _evals(before, before)})
    assert same is not None and "not separable from no change" in same


def test_a_mid_run_status_carries_the_warning() -> None:
    # what the tab sends after a step mid-run (final False): the warning is there at once
    before = [1.0] * 95 + [0.0] * 105
    fell = [0.0] * 27 + before[27:]  # 0.475 -> 0.34 on the same problems
    info = {
        "session_id": "s",
        "steps_done": 10,
        "history": [{"step": s, "method": "gmts", "kl": 30.0} for s in range(1, 11)],
        "evaluations": _evals(before, fell),
    }
    status_text = train.TrainView("s", info, final=False).values()[1]
    assert "⚠ Held-out accuracy is falling" in status_text
    assert "⚠ The policy is moving far from the start" in status_text
    assert "This run:" not in status_text  # the verdict waits for the end
    assert "This run:" in train.TrainView("s", info).values()[1]


def test_two_runs_overlaid_get_a_paired_difference_without_a_verdict() -> None:
    before = [1.0] * 95 + [0.0] * 105
    entropy = {
        "history": [{"step": 1, "method": "entropy"}],
        "evaluations": _evals(before, [1.0] * 110 + [0.0] * 90),
    }
    earlier = train_runs.keep([], entropy)
    gmts = {
        "history": [{"step": 1, "method": "gmts"}],
        "evaluations": _evals(before, [1.0] * 120 + [0.0] * 80),
    }
    text = train_runs.difference_to_earlier(gmts, earlier)
    assert text is not None and text.startswith("gmts \u2212 entropy (run 1) at step 5: +5.0")
    assert "no verdict" in text and "separable" not in text
    assert train_runs.difference_to_earlier(entropy, earlier) is None  # same method: nothing
