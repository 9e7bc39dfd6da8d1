"""gmts_core: token statistics, GMTS and other token selections, GRPO math, rewards, models."""

# Registers the literature's selection methods (Clip-Cov, KL-Cov, Lopti, GTPO, RSI, TR-GRPO)
# next to the core ones, so every front end lists them.
from gmts_core.methods import literature as _literature  # noqa: F401

__version__ = "0.1.0"
