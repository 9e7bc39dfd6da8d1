"""The registries of variants: selection methods (GMTS, the 80/20 entropy rule and the
literature's criteria), the exact GRPO coefficient they score with, group advantages, loss
aggregations, and verifiable reward rules (with the math verifier's helper process).

Every selection method is registered here, when the package is first imported, whichever of
its modules is asked for: the core methods in :mod:`.selection`, the paper's rules beside them,
the literature's criteria in :mod:`.literature`.
"""

from gmts_core.methods import other_papers, selection

__all__ = ["other_papers", "selection"]
