"""What the Explore tab opens on: the default example and the form's default prompt.

The page's first render already holds a highlighted batch (no model run, no click, no wait):
the default example of :mod:`app.services.default_example` -- a small batch of demo prompts in
which one group has no learning signal, so entropy and GMTS visibly disagree -- stored as its
``POST /v1/analyze`` body in ``static/default-example-result.json``. A test checks that the
stored body still matches a fresh analysis with the bundled model; after retraining the model,
regenerate it with ``scripts/choose_default_example.py --regenerate``. The form itself starts on
the demo task's "carry" prompt (what Analyze runs).

One click away sits the same view on a real pretrained model: :func:`real_model_values` fills
the form with a question of the word-arithmetic task for ``smollm2-135m`` (its chat template
on, as the model's default; the ``final_number`` reward rule; 8 answers x 96 tokens) and the
tab runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.services import default_example
from app.services.catalog import REAL_MODEL, WORD_ARITH_REWARD, demo_examples
from app.ui.tabs.explore import view as explore

EXAMPLE_PATH = default_example.RESULT_PATH
EXAMPLE_LABEL = "carry"  # the demo task's example prompt the form starts on


def example_form() -> explore.ExploreForm:
    """The Explore tab's default form: the example prompt with every other field at default."""
    examples = demo_examples()
    first = next((e for e in examples if e.label == EXAMPLE_LABEL), examples[0])
    return explore.ExploreForm(prompt=first.prompt, reference=first.reference)


REAL_MODEL_EXAMPLE = explore.ExploreForm(
    prompt="What is 2 + 2?",
    model=REAL_MODEL,
    reference="4",
    reward_kind=WORD_ARITH_REWARD,
    group_size=8,
    max_new_tokens=96,
)
"""The real-model example: a single-digit question of the word-arithmetic task, one the model
gets right only some of the time (3 of 8 sampled answers right at seed 0 when chosen; the
word problem "Tom has 47 apples and buys 38 more..." got 0 of 8, a group with no signal)."""
REAL_MODEL_FIELDS = (
    "model", "prompt", "reference", "reward_kind", "group_size", "max_new_tokens",
    "answers_text", "explicit_rewards",
)  # fmt: skip
"""The form fields the real-model example sets (pasted answers and rewards emptied)."""
REAL_MODEL_BUTTON = f"Same view on a real model: {REAL_MODEL} (8 answers x 96 tokens)"


def real_model_values() -> list[object]:
    """Values of ``REAL_MODEL_FIELDS`` for the real-model example."""
    return [getattr(REAL_MODEL_EXAMPLE, name) for name in REAL_MODEL_FIELDS]


def load_example(path: Path = EXAMPLE_PATH) -> dict[str, Any] | None:
    """The stored default example's body, or None if unreadable."""
    return default_example.load_default_example(path)
