"""RoPE variants whose frequencies depend on the length of each forward, and what sampling does
about them.

transformers' ``dynamic_rope_update`` (``modeling_rope_utils.py``) recomputes the rotary
frequencies in every forward from that forward's ``seq_len = max(position_ids) + 1``:

- ``longrope`` (Phi-3's ``su`` and ``yarn`` configs are read as it): the short factors while
  ``seq_len <= original_max_position_embeddings`` (the window W), the long factors past it,
  for every position of that forward;
- ``dynamic`` (NTK): a base rescaled for ``seq_len`` once it passes ``max_position_embeddings``
  (W), kept by the module until a forward shorter than W.

A full forward over prompt + answer (what the analysis of given answers and a trainer compute)
rotates every position with the frequencies of its whole length; cached decoding (this
project's sampler and ``generate``) keeps the keys of earlier positions as they were rotated
when the sequence was shorter. So the two differ for an answer whose prompt is within W and
whose prompt + answer is not (by 5 to 10 in log-prob on the tests' tiny random Phi-3). The
sampler's load-time probe (10 tokens) cannot see it.

What is done about it:

- ``longrope``: answers are drawn as ``generate`` draws them (cached decoding), and the
  statistics of every answer that crosses W are re-scored with a full forward
  (:func:`gmts_core.sampling.answers.generate_answers`), so that the reported log-probs and
  statistics are the model's own forward over prompt + answer; said in the log once per model. The
  statistics of given answers come from forwards whose micro-batches never mix sequences
  within W and past it (:func:`gmts_core.stats.forward.answer_token_stats`: a padded forward
  takes its frequencies from the padded length), so each answer's are those of its own forward;
  equal contexts share statistics only on one side of W (:mod:`gmts_core.stats.contexts`).
- ``dynamic``: past W neither decoding nor a full forward is a function of the sequence alone
  (the module keeps the frequencies of its longest forward), so sampling whose prompt +
  ``max_new_tokens`` passes W is refused with :class:`gmts_core.errors.InvalidInputError`.

Paths that rotate with cached or precomputed frequencies are not used for these models: the
fused decoding step (:mod:`gmts_core.sampling.fused_decode`, all positions' rotations from one call
of the rotary module) and the shared-prompt training forward (:mod:`gmts_core.stats.shared_prompts`,
the prompt's cache reused for its answers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gmts_core.errors import InvalidInputError

_LONGROPE = ("longrope", "su")  # "su": Phi-3's earlier name for it


@dataclass(frozen=True)
class RopeWindow:
    """A RoPE whose frequencies change when a forward's length passes ``window`` tokens."""

    rope_type: str  # "longrope" or a "dynamic" type
    window: int  # W: the longest forward that keeps the original frequencies

    def crosses(self, prompt_length: int, answer_length: int) -> bool:
        """Whether cached decoding of this answer differs from a full forward over prompt +
        answer: the prompt is within W (prefilled with the original frequencies) and the whole
        sequence is not (its full forward uses the long ones everywhere)."""
        return prompt_length <= self.window < prompt_length + answer_length


def _rope_dicts(config: Any) -> list[dict[str, Any]]:
    """The RoPE parameter dicts of a config (one, or one per layer type)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not isinstance(params, dict) or not params:
        return []
    if all(isinstance(v, dict) for v in params.values()):  # per layer type
        return list(params.values())
    return [params]


def rope_window(config: Any) -> RopeWindow | None:
    """The window of a config whose RoPE switches frequencies by forward length (a ``dynamic``
    type first, as it is refused), or None."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    found: RopeWindow | None = None
    for params in _rope_dicts(text):
        kind = str(params.get("rope_type", params.get("type", "default")))
        if "dynamic" in kind:
            return RopeWindow(kind, int(text.max_position_embeddings))
        if kind in _LONGROPE:
            window = (
                params.get("original_max_position_embeddings")
                or getattr(text, "original_max_position_embeddings", None)
                or text.max_position_embeddings
            )
            if found is None or int(window) < found.window:
                found = RopeWindow("longrope", int(window))
    return found


def longrope_window(config: Any) -> int | None:
    """W of a ``longrope`` config, else None: full forwards of sequences within W and past it
    give one context different distributions, so only sequences on one side share them
    (:func:`gmts_core.stats.contexts.share_identical_contexts`)."""
    rope = rope_window(config)
    return rope.window if rope is not None and rope.rope_type == "longrope" else None


def refuse_past_window(model: Any, prompt_length: int, max_new_tokens: int) -> None:
    """Raise InvalidInputError if sampling could pass a ``dynamic`` RoPE's window."""
    rope = rope_window(model.config)
    if rope is not None and rope.rope_type != "longrope":
        if prompt_length + max_new_tokens > rope.window:
            raise InvalidInputError(
                f"prompt ({prompt_length} tokens) + max_new_tokens ({max_new_tokens}) passes "
                f"the {rope.window}-token window of this model's '{rope.rope_type}' RoPE, where "
                "transformers' frequencies depend on earlier forwards, so no statistics of its "
                "answers would be reproducible; use at most "
                f"{max(rope.window - prompt_length, 0)} new tokens"
            )
