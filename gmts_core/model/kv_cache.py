"""A pre-allocated key/value cache for the sampler (:mod:`gmts_core.sampling.kv_sampler`).

transformers' ``DynamicCache`` grows every layer's keys and values by ``torch.cat`` at every
decoding step (a copy of the whole cache per step), and its ``StaticCache`` attends over the
full pre-allocated length behind a mask (on CPU the masked attention kernel is slower than the
unmasked one by more than the copy saves). :class:`PreallocatedLayer` allocates each layer's
buffers once, for the longest sequence the call can reach, writes each step's keys and values
in place and hands the attention a *view* of the filled part: no copy, no mask, and exactly the
keys and values a ``DynamicCache`` would hold (the same numbers, so the same logits).

Rows that have finished are dropped with :func:`keep_rows` (the batch shrinks; their buffers
are compacted once, not re-run).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, DynamicSlidingWindowLayer


class PreallocatedLayer(DynamicLayer):
    """One attention layer's keys and values, (B, H, max_length, D) buffers filled in place."""

    def __init__(self, max_length: int) -> None:
        super().__init__()
        self.max_length = max_length
        self.length = 0
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, key_dim = key_states.shape  # (B, H, T, D)
        self.device = key_states.device
        self._key_buffer = key_states.new_empty(batch, heads, self.max_length, key_dim)
        self._value_buffer = value_states.new_empty(
            batch, value_states.shape[1], self.max_length, value_states.shape[-1]
        )
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self._key_buffer is not None and self._value_buffer is not None
        start, end = self.length, self.length + key_states.shape[-2]
        if end > self.max_length:
            raise ValueError(f"the cache holds {self.max_length} positions, {end} were written")
        self._key_buffer[:, :, start:end] = key_states
        self._value_buffer[:, :, start:end] = value_states
        self.length = end
        self.keys = self._key_buffer[:, :, :end]  # (B, H, end, D) views: no copy
        self.values = self._value_buffer[:, :, :end]
        return self.keys, self.values

    def place_rows(self, part: PreallocatedLayer, rows: torch.Tensor, batch: int, end: int) -> None:
        """Give rows ``rows`` of this ``batch``-row cache the filled slots of ``part`` (a
        prefill of prompts of one length), right-aligned so that they end at slot ``end``;
        slots no prompt fills hold zeros (finite: masked out, never read as a row's own key).
        The cache then holds ``end`` slots."""
        keys, values = part.keys, part.values  # (b, H, P, D)
        assert keys is not None and values is not None
        if self._key_buffer is None or self._value_buffer is None:
            self.device = keys.device
            self._key_buffer = keys.new_zeros(batch, keys.shape[1], self.max_length, keys.shape[3])
            self._value_buffer = values.new_zeros(
                batch, values.shape[1], self.max_length, values.shape[3]
            )
            self.is_initialized = True
        assert self._key_buffer is not None and self._value_buffer is not None
        start = end - keys.shape[2]
        self._key_buffer[rows, :, start:end] = keys
        self._value_buffer[rows, :, start:end] = values
        self.length = end
        self._refresh_views()

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.max_length

    def reset(self) -> None:
        self.length = 0
        self._key_buffer = self._value_buffer = None
        super().reset()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self._key_buffer is not None and self._value_buffer is not None:
            self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
            self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
            self._refresh_views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._key_buffer is not None and self._value_buffer is not None:
            self._key_buffer = self._key_buffer.index_select(0, indices)
            self._value_buffer = self._value_buffer.index_select(0, indices)
            self._refresh_views()

    def _refresh_views(self) -> None:
        assert self._key_buffer is not None and self._value_buffer is not None
        self.keys = self._key_buffer[:, :, : self.length]
        self.values = self._value_buffer[:, :, : self.length]


# cache layers whose rows can be dropped and repeated (the others, e.g. linear-attention
# states of hybrid models, are not served: the sampler falls back to ``generate`` for them)
_SHRINKABLE = (DynamicLayer, DynamicSlidingWindowLayer)


def _decoder_layers(config: Any) -> int | None:
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    value = getattr(text, "num_hidden_layers", None)
    return int(value) if isinstance(value, int) else None


def sampling_cache(config: Any, max_length: int) -> Cache:
    """The cache for one sampling call of a model with this config: pre-allocated layers of
    ``max_length`` positions where every layer is plain full attention, else transformers'
    ``DynamicCache`` with the model's own layer types (sliding windows keep their window).

    Raises ValueError for layer kinds whose rows cannot be dropped (recurrent or linear-attention
    states): the sampler does not serve those models.
    """
    dynamic = DynamicCache(config=config)
    if not dynamic.layers:  # no per-layer types in the config: every layer plain attention
        layers = _decoder_layers(config)
        if layers is None:
            raise ValueError("the config names no number of decoder layers")
        return Cache(layers=[PreallocatedLayer(max_length) for _ in range(layers)])
    if all(type(layer) is DynamicLayer for layer in dynamic.layers):
        return Cache(layers=[PreallocatedLayer(max_length) for _ in dynamic.layers])
    odd = sorted(
        {type(layer).__name__ for layer in dynamic.layers if not isinstance(layer, _SHRINKABLE)}
    )
    if odd:
        raise ValueError(f"cache layers {', '.join(sorted(odd))} cannot drop finished rows")
    return dynamic


def keep_rows(cache: Cache, rows: torch.Tensor) -> None:
    """Keep only ``rows`` (indices into the batch) in every layer of ``cache``."""
    for layer in cache.layers:
        layer.batch_select_indices(rows)  # type: ignore[union-attr]


def repeat_rows(cache: Cache, repeats: int) -> None:
    """Repeat every row ``repeats`` times, in place (a prompt's prefill shared by its G answers)."""
    for layer in cache.layers:
        layer.batch_repeat_interleave(repeats)  # type: ignore[union-attr]


def cache_keyword(body: Any) -> str:
    """The keyword a transformer body takes its cache by: ``cache`` in newer models,
    ``past_key_values`` in others."""
    return "cache" if "cache" in inspect.signature(body.forward).parameters else "past_key_values"
