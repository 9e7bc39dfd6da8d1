"""One live GRPO step with token selection, as small named functions in four modules.

rollout            -> (grpo/rollout.py) a group of G sampled answers per prompt, rewarded (the
                      first stage of :func:`gmts_core.analysis.analyze.analyze`)
answer_statistics  -> (grpo/forward.py) the first update's training forward, run *before* the
                      selection: each micro-batch's differentiable log-probs (graphs held for
                      the backward) and its answers' token statistics from the same logits, so
                      the analysis costs no forward pass of its own (batches above
                      ``fused_max_tokens`` take the statistics the rollout collected while
                      sampling instead)
score_batch        -> (here) advantages, every method's selection, summaries and (lazy) records:
                      the last stage of ``analyze``, so what users inspect is what the step
                      trains on
training_batch     -> (grpo/update.py) flat per-token tensors: advantages, weights, the mask
policy_update      -> (grpo/update.py) ``inner_steps`` AdamW updates of the clipped, masked GRPO
                      loss (:mod:`gmts_core.grpo.loss`) with gradient-norm clipping; the first
                      reuses the training forward's graphs; the selection is fixed per batch
                      (default, as TRL) or re-ranked before every later update by
                      gamma = w |omega| g at the current policy (``reselect``)
grpo_step          -> (here) all of the above, plus metrics and (``measure_logprob_after``) the
                      per-token log-prob change, which costs one more forward pass
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import torch

from gmts_core.analysis.analyze import (
    PreparedGroups,
    finish_analysis,
)
from gmts_core.analysis.records import AnalysisResult
from gmts_core.config import CLASS_RECIPE as CLASS_RECIPE
from gmts_core.config import DEMO_RECIPE as DEMO_RECIPE
from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError
from gmts_core.grpo.forward import (
    answer_statistics,
    collect_while_sampling,
    policy_micro_batches,
)
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.grpo.records import (
    StepMetrics,
    StepResult,
)
from gmts_core.grpo.rollout import RLPrompt, rollout, rollout_groups
from gmts_core.grpo.update import policy_update, training_batch
from gmts_core.progress import STATISTICS, StageCallback, Stages
from gmts_core.progress import stages as new_stages
from gmts_core.stats.forward import (
    AnswerStats,
)

logger = logging.getLogger(__name__)


def score_batch(
    policy: TrainablePolicy,
    prepared: PreparedGroups,
    stats: list[AnswerStats],
    config: RLConfig,
    seed: int,
    stages: Stages | None = None,
) -> AnalysisResult:
    """Advantages, selections, records and summaries: the last stage of ``analyze``."""
    analysis_config = config.analysis_config(seed)
    return finish_analysis(policy.as_loaded(), prepared, stats, analysis_config, stages)


def grpo_step(
    policy: TrainablePolicy,
    optimizer: torch.optim.Optimizer,
    prompts: Sequence[RLPrompt],
    config: RLConfig,
    seed: int,
    step: int = 0,
    on_stage: StageCallback | None = None,
) -> StepResult:
    """One GRPO step on ``prompts``: rollout, reward, statistics, selection, update, metrics.

    Each piece of work is done once: the rollout's token ids feed the statistics, the first
    update's training forward yields the statistics (for batches within ``fused_max_tokens``),
    and its log-probs are pi_old for the later inner updates.

    ``on_stage(name, done, total)`` hears each stage as it begins (:mod:`gmts_core.progress`):
    "generating answers", "scoring rewards", "token statistics", "selection", "update" once
    per inner update, then "log-prob after" when ``measure_logprob_after`` is on.
    """
    config.validate()
    if not prompts:
        raise InvalidInputError("a step needs at least one prompt")
    start = time.perf_counter()
    total = 4 + config.inner_steps + int(config.measure_logprob_after)
    stages = new_stages(on_stage, total)  # each stage boundary is a cancellation checkpoint
    collect = collect_while_sampling(config, len(prompts))
    groups = rollout_groups(prompts, config, seed)
    prepared = rollout(policy, groups, config, seed, stages, collect)
    stages.begin(STATISTICS)  # the statistics and first training forward
    parts = policy_micro_batches(policy, prepared.sequences, config)
    collected = prepared.collected_stats() if collect else None
    stats, held = answer_statistics(policy, prepared.sequences, parts, config, collected)
    result = score_batch(policy, prepared, stats, config, seed, stages)
    batch = training_batch(result, prepared.sequences, config)
    lr = config.learning_rate_at(step)
    update = policy_update(policy, optimizer, batch, config, lr, seed, held, stages)
    metrics = StepMetrics.from_parts(step, config, result, batch.mask, update)
    metrics.learning_rate = lr
    metrics.seconds = time.perf_counter() - start
    logger.info("step %d (%s): reward %.3f", step, config.method, metrics.reward_mean)
    return StepResult(
        metrics=metrics,
        analysis=result,
        batch=batch,
        logprob_before=update.logprob_before,
        logprob_after=update.logprob_after,
    )
