"""The example group the Explore tab opens on, shipped as JSON so the page teaches on arrival.

The page's first render already holds a highlighted group (no model run, no click, no wait):
the result of pressing Analyze with the tab's default form (the demo task's "carry" prompt,
G = 8, seed 0) on the bundled demo model, stored in ``static/example-group.json``. A test
checks that the shipped file still matches a fresh analysis with the bundled model; after
retraining the model, regenerate it with ``python -m app.ui.tabs.explore.example``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.services.catalog import demo_examples
from app.services.container import build_services
from app.ui.assets import STATIC_DIR
from app.ui.client import LocalBackend
from app.ui.tabs.explore import view as explore

logger = logging.getLogger(__name__)

EXAMPLE_PATH = STATIC_DIR / "example-group.json"
EXAMPLE_LABEL = "carry"  # the demo task's example prompt the page opens on


def example_form() -> explore.ExploreForm:
    """The Explore tab's default form: the example prompt with every other field at default."""
    examples = demo_examples()
    first = next((e for e in examples if e.label == EXAMPLE_LABEL), examples[0])
    return explore.ExploreForm(prompt=first.prompt, reference=first.reference)


def load_example(path: Path = EXAMPLE_PATH) -> dict[str, Any] | None:
    """The shipped example result (the ``POST /v1/analyze`` body), or None if unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("no example group for the first screen (%s): %s", path, exc)
        return None
    return data if isinstance(data, dict) and data.get("answers") else None


def compute_example(backend: Any) -> dict[str, Any]:
    """The example, freshly analysed by ``backend`` (what Analyze gives on the default form)."""
    result: dict[str, Any] = backend.analyze(explore.build_request(example_form()))
    return result


def main() -> None:
    """Regenerate the shipped example with the bundled demo model."""
    result = compute_example(LocalBackend(build_services(Settings())))
    EXAMPLE_PATH.write_text(json.dumps(result, separators=(",", ":")), encoding="utf-8")
    print(f"wrote {EXAMPLE_PATH} ({EXAMPLE_PATH.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
