"""The bundled demo model ``tiny-arith``: its folder, training it, measuring it (for the CLI)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from app.services.errors import InvalidInputError
from gmts_core.demo import DEMO_MODEL_DIR

__all__ = ["DEMO_MODEL_DIR", "evaluate_demo", "train_demo"]


def train_demo(
    out: Path,
    seed: int = 0,
    steps: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    flaw_rate: float | None = None,
) -> Path:
    """Train the demo model from scratch (the recipe, with the given overrides) into ``out``."""
    from gmts_core.demo.train import FlawMix, TrainConfig, train_demo_model  # torch: when asked

    config = TrainConfig(seed=seed)
    knobs: dict[str, Any] = {"steps": steps, "batch_size": batch_size, "lr": lr}
    config = replace(config, **{k: v for k, v in knobs.items() if v is not None})
    if flaw_rate is not None:
        config = replace(config, mix=FlawMix(flaw_rate=flaw_rate))
    return train_demo_model(out, config)


def evaluate_demo(model: Path, num_prompts: int, group_size: int, seed: int) -> dict[str, Any]:
    """Accuracy, mixed groups and fork-point entropy of a demo model folder on held-out prompts."""
    # transformers and torch (seconds to import): only when `gmts eval-demo` runs
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gmts_core.demo.evaluate import DemoEvalConfig, evaluate_demo_model

    if not (model / "config.json").is_file():
        raise InvalidInputError(f"{model} is not a model folder (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    lm = AutoModelForCausalLM.from_pretrained(str(model))
    config = DemoEvalConfig(num_prompts=num_prompts, group_size=group_size, seed=seed)
    return evaluate_demo_model(lm, tokenizer, config).to_dict()  # type: ignore[no-any-return]
