"""The server-drawn scatter (app.ui.sketch): the Plotly figure's own points, as SVG."""

from __future__ import annotations

import re

from app.ui import charts, sketch
from app.ui.first_view import first_view_html
from app.ui.tabs.explore import example
from app.ui.tabs.explore.tab import example_sketch

_MARK = re.compile(r'<circle cx="([\d.]+)%" cy="([\d.]+)"|<svg x="([\d.]+)%" y="([\d.]+)"')


def _marks(svg: str) -> list[tuple[float, float]]:
    """(x %, y px) of every marker of the plot (not the legend's swatches)."""
    plot = svg[svg.index('role="img"') : svg.index('class="sketch-legend"')]
    return [
        (float(m.group(1) or m.group(3)), float(m.group(2) or m.group(4)))
        for m in _MARK.finditer(plot)
    ]


def test_every_point_of_the_example_scatter_is_drawn_where_plotly_puts_it() -> None:
    shipped = example.load_example()
    figure = charts.group_figures(shipped, ("entropy", "gmts"), 0)["scatter"].to_plotly_json()
    svg = sketch.scatter_svg(figure)
    traces = figure["data"]
    marks = _marks(svg)
    assert len(marks) == sum(len(t["x"]) for t in traces) > 0  # one marker per point
    # the points keep their order along both axes (larger x: further right; larger y: higher)
    xy = [(x, y) for t in traces for x, y in zip(t["x"], t["y"], strict=True)]
    for (xa, ya), (ma, mb) in zip(xy, marks, strict=True):
        for (xb, yb), (na, nb) in zip(xy, marks, strict=True):
            if xa < xb:
                assert ma <= na
            if ya < yb:
                assert mb >= nb
    for t in traces:  # each trace's colour and name (legend)
        assert t["marker"]["color"] in svg and t["name"] in svg
    assert svg.count('fill="none" stroke="#0072B2"') >= len(traces[-1]["x"])  # gmts: open
    assert "Entropy vs gradient proxy" in svg and "entropy H (nats)" in svg
    assert sketch.NOTE in svg  # it says what it is


def test_no_points_no_sketch_and_nice_ticks() -> None:
    assert sketch.scatter_svg({"data": [{"type": "scatter", "x": [None], "y": [1]}]}) == ""
    assert example_sketch(None) == ""
    assert sketch.nice_ticks(-0.05, 0.8) == [0.0, 0.2, 0.4, 0.6, 0.8]
    assert sketch.nice_ticks(0.0, 0.0017) == [0.0, 0.0005, 0.001, 0.0015]
    # one point: a range around it, the point in the middle
    svg = sketch.scatter_svg({"data": [{"type": "scatter", "mode": "markers", "x": [2], "y": [3]}]})
    ((x, _),) = _marks(svg)
    assert abs(x - (sketch.LEFT + (100 - sketch.LEFT - sketch.RIGHT) / 2)) < 0.01


def test_the_first_view_draws_the_example_scatter() -> None:
    shipped = example.load_example()
    view = first_view_html(shipped, "intro", "note")
    figure = charts.group_figures(shipped, ("entropy", "gmts"), 0)["scatter"]
    assert example_sketch(figure) in view  # the same drawing as Explore's
    assert view.index('class="tok') < view.index('class="gmts-sketch"')  # under the tokens
