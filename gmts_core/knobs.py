"""Documented config fields ("knobs"): each setting of a config dataclass is declared once, with
its default, one line of help and its bounds, and every front end reads them from here (the
API's request models, the CLI's options and the UI's controls). No other module imports
anything but the standard library, so any config dataclass of the library can use it.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, field, fields
from typing import Any

# The defaults the library's functions share with the config knobs, each written once: the config
# dataclasses' knobs, the plain reference, the trainers' integrations and the math helpers' keyword
# defaults all import them (tests/app/test_no_retyped_defaults.py refuses a retyped literal)
DEFAULT_RATIO = 0.2  # share of tokens selected: the GMTS paper's (and the 80/20 rule's) 20%
DEFAULT_SCOPE = "batch"  # which tokens compete for the top-k places
DEFAULT_TEMPERATURE = 1.0  # tau of pi = softmax(z / tau): 1 is the model's own distribution
# the most answer tokens a gradcheck takes (one backward pass each: gmts_core.experiments.gradcheck)
DEFAULT_GRADCHECK_MAX_TOKENS = 1024
# the choices of two knobs, listed here so that a config dataclass is read without the methods
# package (torch): the selection scopes (gmts_core.methods.selection) and what a budget counts
# (gmts_core.methods.budget, whose docstring says what each means)
SCOPES = ("batch", "group", "answer")
BUDGET_OVER = ("trained", "content", "all")


def knob(default: Any, help: str, **bounds: float) -> Any:
    """A documented config field: its default, one line of help and its bounds (``ge``, ``gt``,
    ``le``, ``lt``), read by the app's request models, forms and CLI options (:func:`knob_info`).
    A mutable default (a dataclass instance that is not frozen, a list) is given as a
    ``default_factory`` by :func:`knob_factory`."""
    return field(default=default, metadata={"help": help, "bounds": bounds})


def knob_factory(factory: Any, help: str, **bounds: float) -> Any:
    """A documented config field whose default is built by ``factory`` for every instance."""
    return field(default_factory=factory, metadata={"help": help, "bounds": bounds})


def _field(config: type, name: str) -> Field[Any]:
    return {f.name: f for f in fields(config)}[name]


def knob_info(config: type, name: str) -> tuple[str, dict[str, float]]:
    """The help text and bounds of field ``name`` of a config dataclass."""
    meta = _field(config, name).metadata
    return meta["help"], dict(meta["bounds"])


def knob_default(config: type, name: str) -> Any:
    """The default of field ``name`` of the config dataclass ``config``."""
    f = _field(config, name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def is_knob(config: type, name: str) -> bool:
    """Whether field ``name`` of ``config`` is documented as a knob."""
    return "help" in _field(config, name).metadata
