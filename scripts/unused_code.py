"""The unused-code check of ``make lint``: vulture over the code, tests, benchmarks and scripts.

Reported: functions, methods, classes, properties, imports, unreachable code and module constants
(names that start with a capital) that nothing uses. Not reported: lower-case variables and
attributes, which are mostly fields that pydantic, dataclasses, ctypes or a trainer's config read
by reflection (vulture cannot see those reads), and the names frameworks call, listed below with
the reason. Exit status 1 when anything is reported.

    .venv/bin/python scripts/unused_code.py
"""

from __future__ import annotations

import sys

from vulture import Vulture

PATHS = ["gmts_core", "app", "tests", "benchmarks", "scripts"]
MIN_CONFIDENCE = 60
# decorators that register a function with a framework, which then calls it by its registration
REGISTERING_DECORATORS = [
    "@router.*",  # FastAPI routes
    "@app.*",  # typer commands and FastAPI handlers
    "@*.command",  # typer sub-commands
    "@*.callback",
    "@field_validator",  # pydantic
    "@model_validator",
    "@field_serializer",
    "@register_*",  # the project's registries (methods, rewards, readers, ...)
    "@*.register",
    "@*.register_*",
    "@pytest.fixture",
    "@*.fixture",
]
# names a framework calls or reads, not our code
FRAMEWORK_NAMES = [
    "__getattr__",  # module-level lazy imports (gmts_core's front door)
    "__dir__",
    "list_commands",  # click's Group hook (the CLI's command order)
    "handle_starttag",  # html.parser.HTMLParser hooks (tests read HTML with it)
    "handle_endtag",
    "handle_data",
    "on_step_begin",  # transformers TrainerCallback hooks
    "on_step_end",
    "get_max_length",  # transformers' Cache interface
    "get_seq_length",
    "compute_score",  # verl's custom reward function, named in its config
    "get_data_parallel_size",  # verl's engine interface (tests/verl's CPU engine implements it)
    "get_data_parallel_rank",
    "is_mp_src_rank_with_outputs",
    "lr_scheduler_step",
    "pytestmark",  # pytest reads it
    "pytest_collection_modifyitems",  # a pytest hook (tests/conftest.py)
]


def unused() -> list[str]:
    v = Vulture(ignore_names=FRAMEWORK_NAMES, ignore_decorators=REGISTERING_DECORATORS)
    v.scavenge(PATHS)
    return [
        item.get_report()
        for item in v.get_unused_code(min_confidence=MIN_CONFIDENCE)
        if item.typ not in ("variable", "attribute") or item.name[:1].isupper()
    ]


def main() -> int:
    found = unused()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
