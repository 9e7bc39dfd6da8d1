"""Models for the command line: any alias, local folder or hub id the person at the keyboard names.

The server's :class:`~app.services.model_registry.ModelRegistry` only loads allowed models; the
CLI runs on the user's own machine, so it may load any folder. The bundled demo model answers
to its alias ``tiny-arith`` everywhere.
"""

from __future__ import annotations

from pathlib import Path

from gmts_core.demo import DEMO_ALIAS, DEMO_MODEL_DIR
from gmts_core.modeling import LoadedModel, load_model

__all__ = ["DEMO_ALIAS", "DEMO_MODEL_DIR", "LoadedModel", "builtin_aliases", "load_any_model"]


def builtin_aliases() -> dict[str, Path]:
    """Model aliases every install has: the bundled demo model."""
    return {DEMO_ALIAS: DEMO_MODEL_DIR}


def load_any_model(
    name: str, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False
) -> LoadedModel:
    """Load an alias, a local folder or a hub id."""
    source: str | Path = builtin_aliases().get(name, name)
    return load_model(
        source, name=name, device=device, dtype=dtype, trust_remote_code=trust_remote_code
    )
