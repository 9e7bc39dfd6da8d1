"""The model: loading any causal LM (:mod:`.loading`), the path from its final hidden states
to logits (:mod:`.logit_head`), the preallocated KV cache (:mod:`.kv_cache`) and the RoPE window
that decides when a forward must be a full one (:mod:`.rope_window`)."""
