"""The reasons :mod:`gmts_core.analysis.difference_reasons` names, in words.

Each compares a token one method selects alone with the **cut token** of the other method: the
last token the other method keeps where the token competes (its scope). The wording says only
what the numbers compared say: which factor of w·|A|·g is larger or smaller than at the cut.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One reason a token can be selected by only one method."""

    key: str
    label: str
    explanation: str


REASONS: tuple[Reason, ...] = (
    Reason(
        "zero_advantage",
        "zero advantage",
        "Its answer's advantage A is 0 (a zero-signal group, where every reward is equal) "
        "while the token at the other method's cut has one: its gradient w·|A|·g is 0 however "
        "high its entropy, so selecting it spends budget that cannot move the model.",
    ),
    Reason(
        "smaller_advantage",
        "smaller advantage",
        "Its answer's |A| is smaller than that of the token at the other method's cut, and that "
        "is the factor of w·|A|·g that puts its gradient below the cut token's.",
    ),
    Reason(
        "larger_advantage",
        "larger advantage",
        "Its answer's |A| is larger than that of the token at the other method's cut, and that "
        "is the factor of w·|A|·g that puts its gradient above the cut token's.",
    ),
    Reason(
        "cut_zero_advantage",
        "the other's cut has A = 0",
        "The token at the other method's cut is in an answer whose advantage A is 0 (a "
        "zero-signal group): its gradient w·|A|·g is 0, so this token, which has a signal, "
        "has the larger gradient whatever its other factors.",
    ),
    Reason(
        "low_gradient",
        "smaller gradient norm g",
        "The sampled token holds more of its distribution's mass than the token at the other "
        "method's cut, so g = ‖e_y − p‖ is smaller, while the spread of the other tokens can "
        "keep its entropy H high.",
    ),
    Reason(
        "high_gradient",
        "larger gradient norm g",
        "The sampled token was less expected (lower p of the token drawn) than the token at "
        "the other method's cut, so g = ‖e_y − p‖ is larger, even where the entropy is low.",
    ),
    Reason(
        "aggregation_weight",
        "aggregation weight",
        "The loss aggregation weighs its answer differently from the token at the other "
        "method's cut (w = 1/L for 'sample': long answers diluted, short ones weighted up), "
        "and that is the factor of w·|A|·g that sets the two apart.",
    ),
    Reason(
        "mixed",
        "several factors together",
        "Two of w, |A| and g set it apart from the token at the other method's cut by "
        "comparable amounts, in the same direction; no single factor is the reason.",
    ),
    Reason(
        "same_gradient",
        "equal gradient",
        "Its gradient w·|A|·g equals that of the token at the other method's cut, so the "
        "gradient cannot tell them apart: the other method's own score (entropy, a random "
        "draw, a tie rule) decides.",
    ),
    Reason(
        "no_cut",
        "the other keeps none there",
        "The other method keeps no token where this one competes (its scope: the batch, the "
        "group or the answer), so there is no cut token to compare with: its own rule keeps "
        "none there (gmts_paper_verl never keeps a score-0 token, so none of a zero-signal "
        "group).",
    ),
)
REASON_KEYS = tuple(r.key for r in REASONS)
