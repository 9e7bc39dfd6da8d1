"""Sampling G answers per prompt: the entry point (:mod:`.answers`: ``sample_groups``), our
KV-cached decoder (:mod:`.kv_sampler`), its fused decoding step for Llama-layout models
(:mod:`.fused_decode`) and the categorical draw that reproduces ``torch.multinomial`` bit for
bit (:mod:`.categorical`); ``generate`` for models the decoder cannot serve."""
