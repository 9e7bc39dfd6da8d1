"""What is built from analyses and GRPO steps: gradient checks against autograd,
held-out evaluation on the demo task, live-RL sessions, and side-by-side method comparisons.
"""
