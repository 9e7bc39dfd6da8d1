"""The rollout of a GRPO step: G sampled answers per training prompt, rewarded (the first stage
of :func:`gmts_core.analysis.analyze.analyze`, run by the policy being trained)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gmts_core.analysis.analyze import (
    GroupInput,
    PreparedGroups,
    RewardSpec,
    prepare_groups,
)
from gmts_core.config import RLConfig
from gmts_core.grpo.policy import TrainablePolicy
from gmts_core.progress import Stages
from gmts_core.sampling.answers import SamplingConfig


@dataclass(frozen=True)
class RLPrompt:
    """A training prompt and how to reward its answers (e.g. numeric, reference "85")."""

    prompt: str
    reference: str
    reward_kind: str = "numeric"


def rollout_groups(prompts: Sequence[RLPrompt], config: RLConfig, seed: int) -> list[GroupInput]:
    """One group of ``group_size`` answers to sample per prompt, each group with its own seed."""
    return [
        GroupInput(
            prompt=p.prompt,
            sampling=SamplingConfig(
                num_samples=config.group_size,
                temperature=config.temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_new_tokens,
                seed=seed * 1_000_003 + i,
            ),
            reward=RewardSpec(p.reward_kind, p.reference),
        )
        for i, p in enumerate(prompts)
    ]


def rollout(
    policy: TrainablePolicy,
    groups: list[GroupInput],
    config: RLConfig,
    seed: int,
    stages: Stages | None = None,
    collect_stats: bool = False,
) -> PreparedGroups:
    """Sample every group's answers and reward them; with ``collect_stats`` each sampled answer
    carries its tokens' statistics from the sampling (at the loss's temperature)."""
    analysis = config.analysis_config(seed)
    return prepare_groups(policy.as_loaded(), groups, analysis, stages, collect_stats)
