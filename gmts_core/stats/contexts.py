"""One set of statistics per distinct next-token distribution.

Answers of one group share their prompt, and often a prefix: the first answer tokens of a
group are all predicted from the same context, so their next-token distributions are equal in
exact arithmetic. Computed in different rows of a padded batch they differ in the last float32
digits, which would break "ties broken by (group, answer, position)" by rounding noise. Here the
statistics of the distribution (entropy, sum pi^2, top alternatives) of every repeated context
are copied from its first occurrence in (group, answer, position) order, and so are the
target's log-prob and g where the target token is the same too. Equal-in-exact-arithmetic
scores are then bit-equal, and the stable sort of :mod:`gmts_core.methods.selection` breaks their
ties
by flat order.
"""

from __future__ import annotations

from typing import Any

_DISTRIBUTION_FIELDS = ("entropy", "sum_sq_prob", "top_ids", "top_logprobs")
_TARGET_FIELDS = ("logprob", "grad_norm")


def share_identical_contexts(
    sequences: list[tuple[list[int], list[int]]], answers: list[Any]
) -> None:
    """Make the statistics of equal contexts identical, in place.

    ``answers[i]`` is the :class:`gmts_core.stats.forward.AnswerStats` of ``sequences[i]`` =
    (prompt_ids, answer_ids); the context of answer token t is prompt_ids + answer_ids[:t].
    A trie over the contexts finds the repeats in O(total tokens).
    """
    roots: dict[tuple[int, ...], dict[str, Any]] = {}
    for i, (prompt, answer) in enumerate(sequences):
        node = roots.setdefault(tuple(prompt), {"first": None, "next": {}})
        for t, token in enumerate(answer):
            first = node["first"]
            if first is None:
                node["first"] = (i, t)
            else:
                _copy(
                    answers[first[0]],
                    first[1],
                    answers[i],
                    t,
                    sequences[first[0]][1][first[1]] == token,
                )
            node = node["next"].setdefault(token, {"first": None, "next": {}})


def _copy(src: Any, s: int, dst: Any, d: int, same_target: bool) -> None:
    fields = _DISTRIBUTION_FIELDS + (_TARGET_FIELDS if same_target else ())
    for name in fields:
        getattr(dst.stats, name)[d] = getattr(src.stats, name)[s]
    dst.hidden_norm[d] = src.hidden_norm[s]  # the same context: the same hidden state
