"""Request fields for the library's documented knobs (``gmts_core.config``).

Each knob of a library config dataclass (AnalysisConfig, RLConfig, SamplingConfig,
CompareConfig, ...) is documented once, on the dataclass (:func:`gmts_core.knobs.knob`): a
request field built here takes its description and bounds (``ge``, ``gt``, ``le``, ``lt``)
from there, so the OpenAPI schema, the UI and the CLI say the same thing.
"""

from __future__ import annotations

from dataclasses import MISSING
from typing import Any

from pydantic import Field

from gmts_core.knobs import knob_default, knob_info


def config_field(
    config: type, name: str, default: Any = MISSING, note: str = "", **extra: Any
) -> Any:
    """A request field for the knob ``name`` of ``config``: its help and bounds as documented
    on the dataclass. ``default``: the request's default (the knob's when left out); ``note``:
    a sentence appended to the help (e.g. what an omitted value means in this request);
    ``extra``: further pydantic constraints (``max_length``, ``default_factory``)."""
    help_text, bounds = knob_info(config, name)
    description = f"{help_text} {note}" if note else help_text
    if "default_factory" not in extra:
        extra["default"] = knob_default(config, name) if default is MISSING else default
    return Field(description=description, **bounds, **extra)  # type: ignore[call-overload]
