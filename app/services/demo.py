"""The bundled demo model ``tiny-arith``: its folder, training it, measuring it (for the CLI)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gmts_core.base_config import DemoEvalConfig, FlawMix, TrainConfig
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.errors import InvalidInputError
from gmts_core.knobs import knob_info

# training and evaluating import torch and transformers, in the functions that do it: the
# defaults and knobs above are read without them (`gmts train-demo --help`)

__all__ = [
    "DEMO_EVAL_DEFAULTS",
    "DEMO_MODEL_DIR",
    "DEMO_TRAIN_DEFAULTS",
    "FLAW_RATE",
    "evaluate_demo",
    "train_demo",
]

DEMO_TRAIN_DEFAULTS = TrainConfig()
"""The shipped recipe (`gmts train-demo` with no options)."""

DEMO_EVAL_DEFAULTS = DemoEvalConfig()
"""What `gmts eval-demo` measures with no options."""

FLAW_RATE = knob_info(FlawMix, "flaw_rate")
"""The help and bounds of the recipe's flaw rate (a knob of FlawMix, inside TrainConfig)."""


def train_demo(
    out: Path,
    seed: int = DEMO_TRAIN_DEFAULTS.seed,
    steps: int = DEMO_TRAIN_DEFAULTS.steps,
    batch_size: int = DEMO_TRAIN_DEFAULTS.batch_size,
    lr: float = DEMO_TRAIN_DEFAULTS.lr,
    flaw_rate: float = DEMO_TRAIN_DEFAULTS.mix.flaw_rate,
    on_step: Callable[[int, int, float], None] | None = None,
) -> Path:
    """Train the demo model from scratch (the recipe, with the given knobs) into ``out``:
    ``on_step(done, total, loss)`` hears each optimizer step, else a bar shows them."""
    from gmts_core.demo.train import train_demo_model

    mix = replace(DEMO_TRAIN_DEFAULTS.mix, flaw_rate=flaw_rate)
    config = replace(
        DEMO_TRAIN_DEFAULTS, seed=seed, steps=steps, batch_size=batch_size, lr=lr, mix=mix
    )
    return train_demo_model(out, config, progress=on_step is None, on_step=on_step)


def evaluate_demo(model: Path, num_prompts: int, group_size: int, seed: int) -> dict[str, Any]:
    """Accuracy, mixed groups and fork-point entropy of a demo model folder on held-out prompts."""
    if not (model / "config.json").is_file():
        raise InvalidInputError(f"{model} is not a model folder (no config.json)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gmts_core.demo.evaluate import evaluate_demo_model

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    lm = AutoModelForCausalLM.from_pretrained(str(model))
    sampling = replace(DemoEvalConfig().sampling, num_samples=group_size, seed=seed)
    config = DemoEvalConfig(num_prompts=num_prompts, sampling=sampling)
    return evaluate_demo_model(lm, tokenizer, config).to_dict()
