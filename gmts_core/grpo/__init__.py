"""One GRPO step on a trainable copy of a model: the step itself (rollout, rewards,
selection, update), the clipped loss with its KL term, the trainable policy, the selection of a
step, and the step's typed records.
"""
