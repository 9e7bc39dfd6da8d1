"""gmts_core: which answer tokens drive learning in RL with verifiable rewards.

Token statistics (log-prob, entropy, the exact logit-gradient norm), GMTS and the other token
selections, the exact GRPO coefficient, live GRPO steps, rewards, trainer-run readers, and
``GMTSGRPOTrainer`` for TRL. The names a user needs are importable from here::

    from gmts_core import DEMO_MODEL_DIR, AnalysisConfig, GroupInput, RewardSpec
    from gmts_core import analyze, load_model

    lm = load_model(DEMO_MODEL_DIR)  # the bundled demo model tiny-arith
    reward = RewardSpec("numeric", "85")
    group = GroupInput("Q: 47+38=?\\nA:", answers=[" 85", " 75"], reward=reward)
    result = analyze(lm, [group], AnalysisConfig(ratio=0.2))

They load on first use (PEP 562 ``__getattr__``): ``import gmts_core`` imports neither torch
nor TRL, and TRL is imported only when ``GMTSGRPOTrainer`` or ``GMTSGRPOConfig`` is used.
Registries fill themselves from their packages' ``__init__``: every selection method
(:mod:`gmts_core.methods`) and every run reader (:mod:`gmts_core.runs`) is registered before
the first lookup.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it (each line: what it is for)
_EXPORTS: dict[str, str] = {
    # analyse a group (or a batch) of answers: every statistic, every method's selection
    "analyze": "gmts_core.analysis.analyze",
    "GroupInput": "gmts_core.analysis.inputs",
    "RewardSpec": "gmts_core.analysis.inputs",
    "AnalysisConfig": "gmts_core.config",
    "AnalysisResult": "gmts_core.analysis.records",
    "SamplingConfig": "gmts_core.sampling.answers",
    "load_model": "gmts_core.model.loading",
    "DEMO_MODEL_DIR": "gmts_core.demo",  # the bundled model tiny-arith (load_model(DEMO_MODEL_DIR))
    # token selection: the registry of methods and one selection
    "select": "gmts_core.methods.selection",
    "SelectionInputs": "gmts_core.methods.selection",
    "register_method": "gmts_core.methods.selection",
    "list_methods": "gmts_core.methods.selection",
    "register_reward": "gmts_core.methods.rewards",
    "list_rewards": "gmts_core.methods.rewards",
    # live GRPO and exact per-token gradients
    "RLConfig": "gmts_core.config",
    "grpo_step": "gmts_core.grpo.step",
    "gradcheck": "gmts_core.experiments.gradcheck",
    # training runs written by trainers (TRL, verl, ROLL, AReaL, JSONL, the trainer's log)
    "open_run": "gmts_core.runs",
    "register_reader": "gmts_core.runs.registry",
    # TRL (needs the [trl] extra)
    "GMTSGRPOTrainer": "gmts_core.integrations.trl",
    "GMTSGRPOConfig": "gmts_core.integrations.trl",
    # every library error derives from this one
    "GMTSError": "gmts_core.errors",
}

__all__ = [
    "DEMO_MODEL_DIR",
    "AnalysisConfig",
    "AnalysisResult",
    "GMTSError",
    "GMTSGRPOConfig",
    "GMTSGRPOTrainer",
    "GroupInput",
    "RLConfig",
    "RewardSpec",
    "SamplingConfig",
    "SelectionInputs",
    "analyze",
    "gradcheck",
    "grpo_step",
    "list_methods",
    "list_rewards",
    "load_model",
    "open_run",
    "register_method",
    "register_reader",
    "register_reward",
    "select",
]


def __getattr__(name: str) -> Any:
    """Import ``name``'s module on first use and cache the value here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gmts_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # for type checkers and the API reference; nothing is imported at run time
    from gmts_core.analysis.analyze import analyze
    from gmts_core.analysis.inputs import GroupInput, RewardSpec
    from gmts_core.analysis.records import AnalysisResult
    from gmts_core.config import AnalysisConfig, RLConfig
    from gmts_core.demo import DEMO_MODEL_DIR
    from gmts_core.errors import GMTSError
    from gmts_core.experiments.gradcheck import gradcheck
    from gmts_core.grpo.step import grpo_step
    from gmts_core.integrations.trl import GMTSGRPOConfig, GMTSGRPOTrainer
    from gmts_core.methods.rewards import list_rewards, register_reward
    from gmts_core.methods.selection import (
        SelectionInputs,
        list_methods,
        register_method,
        select,
    )
    from gmts_core.model.loading import load_model
    from gmts_core.runs import open_run
    from gmts_core.runs.registry import register_reader
    from gmts_core.sampling.answers import SamplingConfig
