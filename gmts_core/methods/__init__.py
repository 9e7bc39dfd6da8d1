"""The registries of variants: selection methods (GMTS, the 80/20 entropy rule and the
literature's criteria), the exact GRPO coefficient they score with, group advantages, loss
aggregations, and verifiable reward rules (with the math verifier's helper process).

Every selection method is registered here, when the package is first imported, whichever of
its modules is asked for: the core methods in :mod:`.selection`, the paper's rules beside them,
the literature's criteria in :mod:`.literature`. So is every reward rule: those of
:mod:`.rewards` and ``final_number`` (:mod:`.final_number`).
"""

from gmts_core.methods import final_number, other_papers, selection

__all__ = ["final_number", "other_papers", "selection"]
