"""The response of ``POST /v1/analyze``: per-token, per-answer and per-group records and the
teaching summaries, built from the library's typed results by ``app.services.responses``."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from app.schemas.from_dataclass import fields_from
from app.schemas.numbers import Num
from gmts_core.analysis.difference_reasons import Differences, ReasonCount, TokenRef


class Alternative(BaseModel):
    id: int
    text: str
    prob: Num
    logprob: Num = Field(
        None,
        description="log pi of this token, from the log-softmax (not the log of `prob`: a "
        "near-certain token's log p keeps its digits); null at a -inf logit.",
    )


class TokenOut(BaseModel):
    position: int
    id: int
    text: str
    logprob: Num
    prob: Num
    entropy: Num = Field(description="Shannon entropy of the next-token distribution (nats).")
    grad_norm: Num = Field(
        description="L2 norm of d log pi_y / d z (exact, up to float32 rounding of the logits)."
    )
    grad_proxy: Num = Field(
        description="w_i |coef| grad_norm: the exact L2 norm of the GRPO loss gradient at this "
        "token's logits if the token is trained (= |A_i| w_i grad_norm on-policy without KL)."
    )
    ratio: Num = Field(
        1.0,
        description="pi_theta / pi_old (1 here: the analysed policy sampled "
        "or scores the answers).",
    )
    clipped: bool = Field(False, description="Whether the clipped objective is flat here.")
    coef: Num = Field(
        None,
        description="The effective coefficient omega_t = r I A_i + "
        "beta (pi_ref / pi_theta - 1); d loss / d log pi = -w_i omega_t.",
    )
    scores: dict[str, Num]
    ranks: dict[str, int]
    selected: dict[str, bool]
    alternatives: list[Alternative]
    trained: bool = Field(
        True,
        description="Whether the trainer's loss counted this token (its loss mask is 1). A "
        "token it did not count (a tool output, an environment message) is shown with its "
        "text but never selected (rank 0) nor counted in any budget or summary.",
    )
    logged: dict[str, Num] | None = Field(
        None,
        description="What the trainer's dump logged for this token (entropy, trainer_logprob, "
        "inference_logprob, advantage, ...) and its train/inference mismatch (logprob_diff = "
        "log pi_trainer - log pi_inference, importance_ratio; without a logged trainer_logprob "
        "the trainer side is this analysis's recomputed logprob). None: the dump logs none.",
    )
    grad_head: Num = Field(None, description="gamma * ||h_t||: this token's LM-head gradient norm.")
    true_grad_norm: Num = Field(
        None, description="/v1/gradcheck only: exact full-parameter gradient norm of its loss term."
    )
    head_grad_norm: Num = Field(
        None, description="/v1/gradcheck only: the output-projection part of that gradient."
    )


class RewardDetail(BaseModel):
    reward: Num = Field(description="null: the run logged an advantage but no reward it tells.")
    rule: str
    extracted: str | None
    reference: str | None
    verdict: str


class AnswerOut(BaseModel):
    index: int
    text: str
    reward: Num = Field(description="null: the run logged an advantage but no reward it tells.")
    reward_detail: RewardDetail
    advantage: Num
    weight: Num
    length: int
    finished: bool
    tokenization: str = Field(
        "sampled",
        description="How the answer's tokens were obtained: sampled (the generated ids), ids "
        "(given token ids: the trained tokens), or text (given text tokenized on its own, "
        "without special tokens, appended to the prompt's ids as trainers append generated "
        "ids; a text may re-tokenize differently from the ids a model generated).",
    )
    selected_count: dict[str, int]
    tokens: list[TokenOut]


class Spearman(BaseModel):
    batch: Num
    within_answer_median: Num


class Overlap(BaseModel):
    count: int
    jaccard: Num


class Summary(BaseModel):
    model_config = ConfigDict(extra="allow")

    num_tokens: int
    num_answers: int
    num_groups: int
    ratio: Num
    scope: str
    k: int
    zero_signal: bool = Field(description="True when every advantage is 0: no learning signal.")
    num_zero_signal_groups: int
    selected_count: dict[str, int]
    gradient_coverage: dict[str, Num]
    wasted_share: dict[str, Num]
    budget_share: dict[str, list[Num]]
    overlap: dict[str, Overlap]
    spearman_entropy_grad: Spearman


class GroupSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    num_tokens: int
    zero_signal: bool
    reward_mean: Num
    selected_count: dict[str, int]
    gradient_coverage: dict[str, Num]
    spearman_entropy_grad: Spearman


class GroupOut(BaseModel):
    index: int
    prompt: str
    answers: list[AnswerOut]
    summary: GroupSummary


class AnalysisSettingsOut(BaseModel):
    temperature: Num
    advantage: str
    loss_aggregation: str
    ratio: Num
    scope: str
    methods: list[str]


@fields_from(TokenRef)
class TokenRefOut(BaseModel):
    """A token's place (group, answer, position) and the method that selected it alone."""


@fields_from(ReasonCount, tokens=list[TokenRefOut])
class ReasonCountOut(BaseModel):
    """One reason's tokens: counts, each method's share of its own selection, the tokens."""

    model_config = ConfigDict(from_attributes=True)


@fields_from(Differences, reasons=list[ReasonCountOut])
class DifferencesOut(BaseModel):
    """Why two methods differ: the tokens only one of them selects, by reason
    (``gmts_core.analysis.difference_reasons``)."""

    model_config = ConfigDict(from_attributes=True)


class AnalyzeResponse(BaseModel):
    """An analysis (single form: ``prompt`` and ``answers``; batch form: ``groups``) plus human
    ``notes`` (e.g. the zero-signal warning)."""

    model: str
    summary: Summary
    settings: AnalysisSettingsOut
    prompt: str | None = Field(None, description="Single form only.")
    answers: list[AnswerOut] | None = Field(None, description="Single form only.")
    groups: list[GroupOut] | None = Field(None, description="Batch form only.")
    notes: list[str] = Field(default_factory=list)
    differences: list[DifferencesOut] = Field(
        default_factory=list,
        description="Why they differ: for every pair of methods (the summary's overlap order), "
        "the tokens only one selects, grouped by the factor of w·|A|·g that sets each apart "
        "from its reference token: the other method's cut token, the last one it keeps in the "
        "token's scope (-1 where it keeps none there).",
    )
