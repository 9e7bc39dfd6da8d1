"""Token selection methods (a registry) and top-k selection with ranks.

A method maps the per-token quantities of a batch to one score per token; selection keeps the
top k = ceil(ratio * N) tokens of each scope (the whole batch, one group, or one answer).
Ties are broken by flat order, which is (group, answer, position). Adding a method is one
small function decorated with ``@register_method``. A method may bring its own keep rule
(``keep``): the paper's two released code bases keep tokens by rules of their own
(:mod:`gmts_core.methods.gmts_released`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gmts_core.errors import InvalidInputError
from gmts_core.knobs import SCOPES as SCOPES
from gmts_core.methods import gmts_released as paper
from gmts_core.registry import Registry


@dataclass
class SelectionInputs:
    """Flat per-token quantities of a batch, all shape (N,), ordered by (group, answer, pos)."""

    entropy: torch.Tensor  # nats
    logprob: torch.Tensor  # log pi_y
    grad_norm: torch.Tensor  # || d log pi_y / d z ||
    grad_proxy: torch.Tensor  # w_i |omega_t| grad_norm (|A_i| w_i grad_norm on-policy, beta 0)
    signal_scale: torch.Tensor  # w_i |omega_t| (gmts_core.methods.coefficient); |A_i| w_i on-policy
    answer_index: torch.Tensor  # int64, global answer index
    group_index: torch.Tensor  # int64
    seed: int = 0
    # Signed A_i of the token's answer, (N,): the literature methods that need the sign
    # (Clip-Cov / KL-Cov covariance, GTPO's success/failure split) raise without it.
    advantage: torch.Tensor | None = None
    # the effective coefficient (gmts_core.methods.coefficient); None: on-policy, no KL term
    ratio: torch.Tensor | None = None  # pi_theta / pi_old
    clipped: torch.Tensor | None = None  # bool, the clipped objective is flat here
    coef: torch.Tensor | None = None  # omega_t
    kl_coef: torch.Tensor | None = None  # the KL part of omega_t, beta (pi_ref / pi_theta - 1)
    # the reward r_i of each token's answer: the paper's methods standardise it themselves
    # (Framework1: population std; verl: unbiased std); None: they use ``advantage`` as given
    reward: torch.Tensor | None = None
    # the micro-batch (on its process) each token was scored in, int64: Clip-Cov / KL-Cov take
    # their covariance means per micro-batch, as verl's loss does; None: over the whole batch
    micro_batch: torch.Tensor | None = None
    # every answer of the batch, (A,) indexed by answer_index, zero-length answers included:
    # its group (int64) and its reward. The paper's methods count them in G and in the reward
    # mean and std, as Framework1 does; None: only the answers that have tokens are seen
    answer_group: torch.Tensor | None = None
    answer_reward: torch.Tensor | None = None
    # the paper's KL part beta (pi_ref / pi_theta - 1) where the loss's own KL part (kl_coef)
    # is another (TRL's use_bias_correction_kl): gmts_paper scores with the paper's formula,
    # gmts with the loss's coefficient; None: kl_coef is the paper's
    paper_kl_coef: torch.Tensor | None = None
    # the released code's I_trust, bool (N,): flat by the PPO clip alone, where the loss also
    # has a dual clip (verl's clip_ratio_c, TRL's delta) that ``clipped`` includes; the paper's
    # methods score with it (a token with A < 0 and r > delta keeps r A); None: ``clipped``
    paper_clipped: torch.Tensor | None = None
    # bool (N,): did the trainer's loss count the token (its loss mask is 1)? None: every token.
    # A token the loss did not count (a tool output, a template token) is never selected nor
    # ranked (rank 0) and counts in no budget (select, selection_budget) and no summary
    trained: torch.Tensor | None = None
    # the budget rule (gmts_core.methods.budget, budget_over): bool (N,) the tokens a method may
    # select (None: the trained ones) and the tokens its budget counts (None: the candidates)
    candidates: torch.Tensor | None = None
    counted: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.entropy.numel())

    @property
    def all_trained(self) -> bool:
        return self.trained is None or bool(self.trained.all())

    def pools(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(the tokens a method may select, the tokens its budget counts), on the CPU; None
        for every token (and the second None where it is the first)."""
        chosen = self.candidates if self.candidates is not None else self.trained
        chosen = None if chosen is None or bool(chosen.all()) else chosen.cpu()
        counted = self.counted
        counted = None if counted is None or bool(counted.all()) else counted.cpu()
        if self.counted is None:
            return chosen, chosen
        return chosen, counted


@dataclass(frozen=True)
class SelectionMethod:
    name: str
    score: Callable[[SelectionInputs], torch.Tensor]
    description: str  # one line, shown next to the name in listings and pickers
    uses_ratio: bool = True  # False: the method keeps every token (plain GRPO)
    citation: str = ""  # the paper the criterion comes from (arXiv id and title)
    details: str = ""  # formula, constants and the choices the paper leaves open
    kind: str = "selection"  # "selection", or "weighting": tokens scored by their weight
    default_scope: str = "batch"  # the scope front ends use when this method is chosen alone
    # (scores, scope ids, ratio) -> (ranks, selected); None: the top ceil(ratio * n) per scope
    keep: KeepRule | None = None
    # True: a live RL step re-selects before every inner update after the first, at the
    # current policy (the rule re-selects per PPO mini-batch), whatever RLConfig.reselect says
    reselects: bool = False
    # the KL weight front ends use when this method is chosen and no beta is given (None: the
    # config's own); gmts_paper: Framework1's kl_beta 0.001
    default_beta: float | None = None


KeepRule = Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]

METHODS: Registry[SelectionMethod] = Registry("selection method")


def register_method(
    name: str,
    description: str,
    uses_ratio: bool = True,
    citation: str = "",
    details: str = "",
    kind: str = "selection",
    default_scope: str = "batch",
    keep: KeepRule | None = None,
    reselects: bool = False,
    default_beta: float | None = None,
) -> Callable[
    [Callable[[SelectionInputs], torch.Tensor]], Callable[[SelectionInputs], torch.Tensor]
]:
    """Register a scoring function as selection method ``name`` (decorator)."""

    def wrap(
        fn: Callable[[SelectionInputs], torch.Tensor],
    ) -> Callable[[SelectionInputs], torch.Tensor]:
        spec = SelectionMethod(
            name,
            fn,
            description,
            uses_ratio,
            citation,
            details,
            kind,
            default_scope,
            keep,
            reselects,
            default_beta,
        )
        METHODS.register(name)(spec)
        return fn

    return wrap


def list_methods() -> list[str]:
    return METHODS.names()


def default_scope(methods: list[str] | tuple[str, ...]) -> str:
    """The scope for a choice of methods: a lone method's own default (``gmts_paper`` and
    ``gmts_paper_verl``: group, as in the paper), else ``batch``."""
    return METHODS.get(methods[0]).default_scope if len(methods) == 1 else "batch"


@register_method("entropy", "Shannon entropy H (the 80/20 rule; TRL top_entropy_quantile)")
def entropy_score(x: SelectionInputs) -> torch.Tensor:
    return x.entropy


@register_method(
    "gmts", "GMTS: exact logit-gradient norm w |omega| g of the GRPO loss (|A| w g on-policy)"
)
def gmts_score(x: SelectionInputs) -> torch.Tensor:
    return x.grad_proxy


@register_method("gmts_entropy", "GMTS entropy approximation w |omega| H (|A| w H on-policy)")
def gmts_entropy_score(x: SelectionInputs) -> torch.Tensor:
    return x.signal_scale * x.entropy


@register_method(
    "gmts_paper",
    "GMTS paper, Framework1 code: H |r I A + beta rho - beta| / (G |o_i|), its cut per group",
    default_scope="group",
    keep=paper.framework1_keep,
    default_beta=paper.FRAMEWORK1_KL_BETA,
    citation="arXiv 2608.30632, GMTS (EMNLP 2026 Findings): its released Framework1",
    details=(
        "Reproduces outongyiLv/GMTS GMTS-Framework1/grpo_tools/grpo.py, GMTS() with "
        "method='grpo' as update_policy() calls it (recipe example/Qwen2.5-math-1.5b-grpo-"
        "GMTS.yaml). score = H_t |r_t I_t A_i + beta (pi_ref/pi_theta - 1)| / (G |o_i|): the "
        "KL part is divided by G |o_i| like the advantage; A_i = (r_i - mean r) / (std r + "
        "1e-6) with the population std (normalize_rewards_per_group, np.std), computed here "
        "from each answer's reward whatever the analysis's advantage estimator; G = answers "
        "in the token's group (zero-length answers included when the caller lists every "
        "answer, SelectionInputs.answer_group/answer_reward, as Framework1 counts them in G "
        "and in the reward mean and std), |o_i| = its answer's length. Keep rule, per scope "
        "(default group, as GMTS() groups by prompt): a stable ascending sort, the lowest "
        "max(1, ceil(N p)) removed, p the share removed as Framework1's config writes it, "
        "the decimal complement of ratio (ratio 0.7 = selected_percent 0.3, the float 0.3, "
        "not 1.0 - 0.7; ratio 0.2 = 0.8: 200 of 1001 kept), N p a plain float product as in "
        "GMTS(); at a tie on the boundary the later (answer, position) tokens stay; at least "
        "1 kept (Framework1 keeps none where it removes all, e.g. a group of < 5 tokens at "
        "0.2). Selected once per step on the whole batch at the sampling policy (ratio 1), "
        "as the recipe's single mini-batch per step. Framework1's defaults: kl_beta 0.001 (a "
        "live RL session with this method and no beta given takes it), "
        "H at temperature 1 (here H at the analysis's temperature; set 1 to match), clip "
        "0.2/0.28. The KL part is the paper's beta (pi_ref/pi_theta - 1) also where the "
        "trainer's loss has another (TRL's use_bias_correction_kl: SelectionInputs."
        "paper_kl_coef); gmts ranks by the loss's own. The unselected tokens' advantage is "
        "zeroed; the KL term still covers every token and the loss's denominators are "
        "unchanged. Not reproduced: Framework1 also drops a kept token whose entropy is "
        "exactly 0 (its gradient is 0 to float32 precision there)."
    ),
)
def gmts_paper_score(x: SelectionInputs) -> torch.Tensor:
    """delta_t = H_t |r_t I_t A_i + beta (pi_ref / pi_theta - 1)| / (G |o_i|), A_i with the
    population std (eps 1e-6) of the group's rewards (:mod:`gmts_core.methods.gmts_released`)."""
    g = paper.answers_per_group(x.answer_index, x.group_index, x.answer_group)
    scale = g * paper.answer_lengths(x.answer_index)
    return _paper_score(x, unbiased=False, eps=paper.FRAMEWORK1_STD_EPS, scale=scale)


@register_method(
    "gmts_paper_verl",
    "GMTS paper, verl code: H |r I A + beta rho - beta|, above the 80% non-zero cut per group",
    default_scope="group",
    keep=paper.framework2_keep,
    reselects=True,
    citation="arXiv 2608.30632, GMTS (EMNLP 2026 Findings): its released verl code",
    details=(
        "Reproduces the rule of outongyiLv/GMTS GMTS-Framework2/verl/workers/actor/"
        "dp_actor.py, DataParallelPPOActor.update_policy() with doing_entropy_clipping_type="
        "GMTS (script examples/dapo_trainer/run_qwen3_8b_qwa.sh: percent 0.8, token-mean, no "
        "KL loss). score = H_t |r_t I_t A_i + beta (pi_ref/pi_theta - 1)| with the raw "
        "advantage, no length normalisation whatever the loss aggregation; I_t = 0 by the PPO "
        "clip only, as its I_trust: under verl's dual clip (clip_ratio_c) or TRL's delta a "
        "token with A < 0 and r > c keeps its score r A (its loss term is flat there; gmts "
        "ranks it 0); A_i with the "
        "unbiased std, eps 1e-6 (verl's GRPO advantage; a one-answer group has mean 0 and std 1 "
        "there, so A = r / (1 + 1e-6)), from each answer's reward; H at the "
        "rollout temperature (as _forward_micro_batch divides the logits by it). Keep rule, "
        "per scope (default group): with p the script's percent (the share removed, the "
        "decimal complement of ratio: ratio 0.8 = percent 0.2, the float 0.2, not 1.0 - 0.8) "
        "and the n non-zero scores sorted ascending, a token is kept when its score "
        "is strictly above the int(n p)-th smallest (0-based index int(p n) - 1; all non-zero "
        "ones when int(p n) = 0): score-0 tokens are never kept and every token tied at the "
        "threshold is dropped, so the count varies. Re-selected at the current policy before "
        "every update after the first (live RL, ratio != 1 there) and on every micro-batch in "
        "the TRL trainer. Not reproduced (defects of that code): its group loop filters only "
        "the first rows // 16 rows' groups (one group in four on the Qwen3-8B script); with "
        "dynamic batch sizes its micro-batches are reordered and never restored, so scores "
        "are misaligned with rows; groups are contiguous blocks of 16 rows there, group ids "
        "here; padding positions can enter its non-zero count with a KL loss, never here."
    ),
)
def gmts_paper_verl_score(x: SelectionInputs) -> torch.Tensor:
    """delta_t = H_t |r_t I_t A_i + beta (pi_ref / pi_theta - 1)|, A_i with the unbiased std
    (eps 1e-6) of the group's rewards, no length normalisation
    (:mod:`gmts_core.methods.gmts_released`)."""
    return _paper_score(x, unbiased=True, eps=paper.VERL_STD_EPS, scale=None)


def _paper_score(
    x: SelectionInputs, unbiased: bool, eps: float, scale: torch.Tensor | None
) -> torch.Tensor:
    """The paper's score with the advantage standardised from ``reward`` (else the caller's
    ``advantage``; with neither, the caller's omega_t, which holds r I A + KL already)."""
    kl = x.paper_kl_coef if x.paper_kl_coef is not None else x.kl_coef
    if x.reward is not None or x.answer_reward is not None:
        reward = x.reward if x.reward is not None else torch.zeros_like(x.entropy)
        adv = paper.group_standardised_advantages(
            reward,
            x.answer_index,
            x.group_index,
            unbiased,
            eps,
            x.answer_reward,
            None if x.answer_reward is None else x.answer_group,
        )
    elif x.advantage is not None:
        adv = x.advantage
    elif x.coef is not None:
        return paper.paper_score(x.entropy, x.coef, None, None, None, scale)
    else:
        raise InvalidInputError(
            "the paper's methods need each token's reward, advantage or coefficient "
            "(SelectionInputs.reward / advantage / coef); analyses and trainers supply them"
        )
    clipped = x.paper_clipped if x.paper_clipped is not None else x.clipped
    return paper.paper_score(x.entropy, adv, x.ratio, clipped, kl, scale)


@register_method("surprisal", "surprisal -log p: low-probability tokens carry large gradients")
def surprisal_score(x: SelectionInputs) -> torch.Tensor:
    return -x.logprob


@register_method("random", "seeded uniform random scores (a control)")
def random_score(x: SelectionInputs) -> torch.Tensor:
    gen = torch.Generator().manual_seed(x.seed)
    return torch.rand(x.num_tokens, generator=gen, dtype=torch.float64).to(x.entropy.device)


@register_method("all", "every token (plain GRPO)", uses_ratio=False)
def all_score(x: SelectionInputs) -> torch.Tensor:
    return torch.ones_like(x.entropy)


def top_k_count(ratio: float, n: int) -> int:
    """k = ceil(ratio * n), robust to float noise (0.7 * 10 is 7, not 8)."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return min(n, math.ceil(round(ratio * n, 9)))


@dataclass
class Selection:
    """Result of one method: scores, ranks within the scope (1 = highest), selected flags."""

    method: str
    scores: torch.Tensor  # (N,) float
    ranks: torch.Tensor  # (N,) int64, 1-based within the token's scope
    selected: torch.Tensor  # (N,) bool


def rank_and_select(
    scores: torch.Tensor, scope_ids: torch.Tensor, ratio: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ranks (1 = highest score) and top-k flags within each scope; ties by flat order."""
    n = scores.numel()
    ranks = torch.zeros(n, dtype=torch.long)
    selected = torch.zeros(n, dtype=torch.bool)
    clean = torch.nan_to_num(scores.detach().double().cpu(), nan=-math.inf)
    scope_cpu = scope_ids.cpu()
    for scope in torch.unique(scope_cpu):
        idx = (scope_cpu == scope).nonzero().squeeze(-1)  # (n_s,) ascending flat order
        order = torch.sort(clean[idx], descending=True, stable=True).indices
        ranks[idx[order]] = torch.arange(1, idx.numel() + 1)
        selected[idx[order[: top_k_count(ratio, idx.numel())]]] = True
    return ranks, selected


def scope_ids_for(x: SelectionInputs, scope: str) -> torch.Tensor:
    """The id of each token's scope: one for the batch, its group, or its answer."""
    if scope == "batch":
        return torch.zeros_like(x.answer_index)
    if scope == "group":
        return x.group_index
    if scope == "answer":
        return x.answer_index
    raise ValueError(f"unknown scope {scope!r}; valid: {', '.join(SCOPES)}")


def selection_budget(x: SelectionInputs, ratio: float, scope: str) -> int:
    """k: how many tokens a ratio-based method selects in total (ceil(ratio * n) per scope,
    n counting the trained tokens only)."""
    ids = scope_ids_for(x, scope).cpu()
    counted = x.pools()[1]
    if counted is not None:
        ids = ids[counted]
    counts = torch.bincount(ids)
    return sum(top_k_count(ratio, int(n)) for n in counts if n > 0)


def select(x: SelectionInputs, method: str, ratio: float, scope: str | None = None) -> Selection:
    """Score every token with ``method`` and keep the top ceil(ratio * N) of each scope (or
    what the method's own keep rule keeps). ``scope`` None: the method's own default scope
    (``group`` for ``gmts_paper`` and ``gmts_paper_verl``, ``batch`` for the others)."""
    spec = METHODS.get(method)
    scores = spec.score(x)
    keep = spec.keep or rank_and_select
    scope_ids = scope_ids_for(x, spec.default_scope if scope is None else scope)
    share = ratio if spec.uses_ratio else 1.0
    chosen, counted = x.pools()
    if counted is None and chosen is None:
        ranks, selected = keep(scores, scope_ids, share)
        return Selection(method, scores, ranks, selected)
    # the keep rule sees the counted tokens only: the budget is ceil(ratio * counted tokens);
    # a counted token that may not be selected (budget_over "all": an untrained one) scores
    # NaN, last in every ranking, and is dropped from the selection
    pool = counted if counted is not None else torch.ones(x.num_tokens, dtype=torch.bool)
    idx = pool.nonzero().squeeze(-1)
    ranks = torch.zeros(x.num_tokens, dtype=torch.long)
    selected = torch.zeros(x.num_tokens, dtype=torch.bool)
    if idx.numel():
        sub = scores.detach().cpu()[idx]
        if chosen is not counted and chosen is not None:
            sub = torch.where(chosen[idx], sub, torch.full_like(sub, math.nan))
        sub_ranks, sub_selected = keep(sub, scope_ids.cpu()[idx], share)
        ranks[idx], selected[idx] = sub_ranks.cpu(), sub_selected.cpu()
    if chosen is not None:
        ranks[~chosen], selected[~chosen] = 0, False
    return Selection(method, scores, ranks.to(scores.device), selected.to(scores.device))
