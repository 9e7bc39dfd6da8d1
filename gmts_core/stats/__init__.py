"""Per-token statistics of a causal LM: the chunked metrics (entropy, sum pi^2, g, top
alternatives), one forward pass over given answers, the same statistics collected while sampling,
shared contexts for exact ties, token texts, and how prompts and answers are tokenized.
"""
