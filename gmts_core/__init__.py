"""gmts_core: token statistics, GMTS and other token selections, GRPO math, rewards, models."""

__version__ = "0.1.0"
