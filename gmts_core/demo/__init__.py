"""The bundled demo model ``tiny-arith``: a tiny Llama trained on the arithmetic task.

The shipped Hugging Face folder is :data:`DEMO_MODEL_DIR`; the model loader resolves the alias
:data:`DEMO_ALIAS` to it. :mod:`gmts_core.demo.train` regenerates it and
:mod:`gmts_core.demo.evaluate` measures it. Importing this package does not import torch.
"""

from __future__ import annotations

from pathlib import Path

DEMO_ALIAS = "tiny-arith"
DEMO_MODEL_DIR: Path = Path(__file__).resolve().parent / DEMO_ALIAS

__all__ = ["DEMO_ALIAS", "DEMO_MODEL_DIR"]
