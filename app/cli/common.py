"""Options and helpers shared by the CLI commands (model choice, groups from flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gmts_core.analysis import DEFAULT_METHODS, AnalysisConfig, GroupInput, RewardSpec
from gmts_core.errors import GMTSError, InvalidInputError
from gmts_core.modeling import LoadedModel, load_model
from gmts_core.sampling import SamplingConfig
from gmts_core.selection import default_scope, list_methods


def builtin_aliases() -> dict[str, Path]:
    """Model aliases every install has: the bundled demo model."""
    from gmts_core.demo import DEMO_ALIAS, DEMO_MODEL_DIR

    return {DEMO_ALIAS: DEMO_MODEL_DIR}


def load_cli_model(
    name: str, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False
) -> LoadedModel:
    """Load an alias, a local folder or a hub id (the CLI user may name any folder)."""
    source: str | Path = builtin_aliases().get(name, name)
    return load_model(
        source, name=name, device=device, dtype=dtype, trust_remote_code=trust_remote_code
    )


def parse_rewards(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"--rewards must be comma-separated numbers, got {text!r}"
        ) from None


def group_from_flags(
    prompt: str,
    answers: list[str] | None,
    num_samples: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
    rewards: str | None,
    reward_kind: str,
    reference: str | None,
) -> GroupInput:
    """One group from CLI flags: given answers or sampling, explicit rewards or a rule."""
    explicit = parse_rewards(rewards)
    if explicit is None and reference is None:
        raise typer.BadParameter("give --rewards or --reference (with --reward-kind)")
    sampling = (
        None
        if answers
        else SamplingConfig(
            num_samples=num_samples,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=seed,
        )
    )
    reward = None if explicit is not None else RewardSpec(reward_kind, reference)
    return GroupInput(prompt, answers or None, sampling, reward, explicit)


def fail(exc: GMTSError | InvalidInputError) -> typer.Exit:
    """Print a library error plainly and return the exit to raise."""
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


# --- options shared by `analyze`, `gradcheck` and `analyze-file` ------------------------------

ModelOpt = Annotated[str, typer.Option(help="Alias, local folder or hub id.")]
PromptOpt = Annotated[str, typer.Option(help="The prompt text.")]
AnswerOpt = Annotated[list[str] | None, typer.Option(help="A given answer (repeat); else sample.")]
NumSamplesOpt = Annotated[int, typer.Option("-n", "--num-samples", help="Answers to sample.")]
RewardsOpt = Annotated[str | None, typer.Option(help="Explicit rewards, e.g. 1,0,0,1.")]
RewardKindOpt = Annotated[str, typer.Option(help="numeric | exact | regex | math")]
ReferenceOpt = Annotated[str | None, typer.Option(help="Reference answer for the rule.")]
RatioOpt = Annotated[float, typer.Option(help="Share of tokens each method selects.")]
AdvantageOpt = Annotated[str, typer.Option(help="grpo | dr_grpo | rloo")]
AggregationOpt = Annotated[str, typer.Option(help="Loss aggregation.")]
TemperatureOpt = Annotated[float, typer.Option(help="Sampling and statistics temperature.")]
TopPOpt = Annotated[float, typer.Option(help="Nucleus sampling.")]
MaxNewTokensOpt = Annotated[int, typer.Option(help="Longest sampled answer.")]
SeedOpt = Annotated[int, typer.Option(help="Sampling seed.")]
TopAlternativesOpt = Annotated[int, typer.Option(help="Alternatives per token.")]
ChatTemplateOpt = Annotated[bool, typer.Option(help="Wrap the prompt in the chat template.")]


MethodsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--method",
        help=f"Selection method, repeat for several (default: {', '.join(DEFAULT_METHODS)}); "
        f"registered: {', '.join(list_methods())}.",
    ),
]
ScopeOpt = Annotated[
    str | None,
    typer.Option(
        help="batch | group | answer (default: batch; group when the only --method is "
        "gmts_paper, as in the paper)."
    ),
]


def analysis_config(
    temperature: float,
    advantage: str,
    aggregation: str,
    ratio: float,
    scope: str | None,
    top_alternatives: int,
    seed: int = 0,
    chat_template: bool = False,
    methods: list[str] | None = None,
) -> AnalysisConfig:
    """The AnalysisConfig the CLI flags describe."""
    chosen = tuple(methods) if methods else DEFAULT_METHODS
    return AnalysisConfig(
        temperature=temperature,
        advantage=advantage,
        loss_aggregation=aggregation,
        ratio=ratio,
        scope=scope or default_scope(chosen),
        methods=chosen,
        top_alternatives=top_alternatives,
        seed=seed,
        chat_template=chat_template,
    )
