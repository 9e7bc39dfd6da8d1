"""Every limit at the edge of its documented range starts the server with the UI on (issue 36,
item 10).

The limits are the numeric ``GMTS_*`` settings with a bound, read from the settings object's
own field constraints (``ge``/``gt``/``le``/``lt``), so a new limit is covered without touching
this file. Each extreme set (all at their minimum, all at their maximum; an unbounded maximum
is :data:`UNBOUNDED_INT` / :data:`UNBOUNDED_FLOAT`) builds the whole app, Gradio Blocks
included, and is served once by a real uvicorn server whose ``/ui`` page and ``/healthz``
answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import annotated_types as at
import httpx
import pytest

from app.core.config import Settings
from app.main import create_app
from tests.app.api_helpers import LiveServer, make_settings
from tests.patience import PATIENCE_S

UNBOUNDED_INT = 2**31 - 1  # a documented limit without a maximum: the largest 32-bit value
UNBOUNDED_FLOAT = 1e9
GT_STEP = 1e-3  # "greater than x": the smallest value above x a user would write
# where to listen and how many threads to use: settings, not limits (their bounds are the TCP
# port range and a sane thread count; 2**31 - 1 torch threads made later tests in the same
# process try to allocate 1.2 TB)
NOT_LIMITS = {"port", "torch_threads"}


def _numeric(annotation: Any) -> type | None:
    for kind in (int, float):
        if annotation is kind or annotation == kind | None:
            return kind
    return None


def limit_extremes() -> dict[str, tuple[float, float]]:
    """(minimum, maximum) of every bounded numeric setting, from its field constraints."""
    extremes: dict[str, tuple[float, float]] = {}
    for name, field in Settings.model_fields.items():
        kind = _numeric(field.annotation)
        if kind is None or name in NOT_LIMITS:
            continue
        low = high = None
        for c in field.metadata:
            if isinstance(c, at.Ge):
                low = c.ge
            elif isinstance(c, at.Gt):
                low = c.gt + (1 if kind is int else GT_STEP)
            elif isinstance(c, at.Le):
                high = c.le
            elif isinstance(c, at.Lt):
                high = c.lt - (1 if kind is int else GT_STEP)
        if low is None and high is None:
            continue
        if high is None:
            high = UNBOUNDED_INT if kind is int else UNBOUNDED_FLOAT
        extremes[name] = (kind(low if low is not None else 0), kind(high))
    return extremes


def test_the_limits_are_found() -> None:
    found = limit_extremes()
    # a sample of the limits the issue names, to show the derivation finds them
    for name in ("max_session_steps", "max_step_prompts", "max_new_tokens", "max_sessions"):
        assert name in found
    assert found["max_session_steps"][0] == 1
    assert "port" not in found


@pytest.fixture(autouse=True)
def _torch_threads_restored() -> Any:
    """create_app sets torch's process-wide thread count from GMTS_TORCH_THREADS: put it back
    for the tests that run after these in the same process."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("edge", [0, 1], ids=["minimum", "maximum"])
def test_every_limit_at_an_edge_starts_the_server_with_the_ui(
    model_root: Path, tmp_path: Path, edge: int
) -> None:
    values = {name: pair[edge] for name, pair in limit_extremes().items()}
    settings = make_settings(
        model_root, ui_enabled=True, session_state_dir=tmp_path / "state", **values
    )
    for name, value in values.items():
        assert getattr(settings, name) == value, name
    app = create_app(settings)  # builds every tab's Blocks
    with LiveServer(app) as live:
        assert httpx.get(f"{live.url}/healthz", timeout=PATIENCE_S).status_code == 200
        ui = httpx.get(f"{live.url}/ui/", timeout=PATIENCE_S)
        assert ui.status_code == 200, ui.text[:500]
