"""The bundled demo model `tiny-arith`: its folder, tokenizer, training and evaluation."""

from __future__ import annotations

from pathlib import Path

DEMO_ALIAS = "tiny-arith"
DEMO_MODEL_DIR = Path(__file__).resolve().parent / "tiny-arith"
