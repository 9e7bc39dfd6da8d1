"""What the Explore tab opens on: the arrival example and the form's default prompt.

The page's first render already holds a highlighted batch (no model run, no click, no wait):
the arrival example of :mod:`app.services.arrival_example` -- a small batch of demo prompts in which
one group has no learning signal, so entropy and GMTS visibly disagree -- stored as its
``POST /v1/analyze`` body in ``static/arrival-result.json``. A test checks that the stored body
still matches a fresh analysis with the bundled model; after retraining the model, regenerate
it with ``scripts/choose_arrival_example.py --regenerate``. The form itself starts on the demo
task's "carry" prompt (what Analyze runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.services import arrival_example as arrival
from app.services.catalog import demo_examples
from app.ui.tabs.explore import view as explore

EXAMPLE_PATH = arrival.RESULT_PATH
EXAMPLE_LABEL = "carry"  # the demo task's example prompt the form starts on


def example_form() -> explore.ExploreForm:
    """The Explore tab's default form: the example prompt with every other field at default."""
    examples = demo_examples()
    first = next((e for e in examples if e.label == EXAMPLE_LABEL), examples[0])
    return explore.ExploreForm(prompt=first.prompt, reference=first.reference)


def load_example(path: Path = EXAMPLE_PATH) -> dict[str, Any] | None:
    """The stored arrival body, or None if unreadable."""
    return arrival.load_arrival(path)


def compute_example(backend: Any) -> dict[str, Any]:
    """The arrival example, freshly analysed by ``backend``."""
    result: dict[str, Any] = backend.analyze(arrival.arrival_request())
    return result
