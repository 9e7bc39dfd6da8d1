"""The analysed run's charts: every step tick labelled once, whole steps only, and the legend
below the x axis's labels and title, not on them."""

from __future__ import annotations

from app.reports.analysed_report import LAYOUT, reward_entropy_figure, selection_figure, step_ticks


def _body(steps: list[int]) -> dict:
    row = {
        "reward_mean": 0.5, "zero_signal_share": 0.3, "entropy_mean": 0.2, "overlap": 0.4,
        "coverage": {"entropy": 0.5, "gmts": 0.9}, "wasted": {"entropy": 0.1, "gmts": 0.0},
    }  # fmt: skip
    return {"run": {"methods": ["entropy", "gmts"]}, "steps": [{**row, "step": s} for s in steps]}


def _labels(steps: list[int]) -> list[int]:
    t = step_ticks(steps)
    return list(range(t["tick0"], max(steps) + 1, t["dtick"]))


def test_step_ticks_are_whole_steps_each_once() -> None:
    assert _labels([1, 2, 3, 4]) == [1, 2, 3, 4]  # was "1, 1, 2, 3, 4"
    assert _labels([1, 2]) == [1, 2]
    many = _labels(list(range(1, 12_289)))
    assert len(many) == len(set(many)) <= 11 and many[0] == 1
    assert _labels([5]) == [5]
    for figure in (reward_entropy_figure(_body([1, 2, 3, 4])), selection_figure(_body([7, 9]))):
        axis = figure.layout.xaxis
        assert axis.tickmode == "linear" and float(axis.dtick).is_integer()


def test_the_legend_is_below_the_axis_title() -> None:
    plot_px = LAYOUT["height"] - LAYOUT["margin"]["t"] - LAYOUT["margin"]["b"]
    gap_px = -LAYOUT["legend"]["y"] * plot_px  # plot bottom to the legend's top
    assert gap_px >= 50  # tick labels (12 px) + axis title (14 px) + plotly's padding
    assert LAYOUT["margin"]["b"] >= gap_px + 40  # and the legend's row fits in the margin
