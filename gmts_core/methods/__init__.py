"""The registries of variants: selection methods (GMTS, the 80/20 entropy rule and the
literature's criteria), the exact GRPO coefficient they score with, group advantages, loss
aggregations, and verifiable reward rules (with the math verifier's helper process).
"""
