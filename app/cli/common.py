"""Options and helpers shared by the CLI commands (model choice, groups from flags)."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast, get_type_hints

import typer
from rich.console import Console

# The options below are read from the knobs' catalog, which imports no torch: `gmts <command>
# --help` builds them without the model stack. The services (torch, transformers) are imported
# when a command runs (tests/app/cli/test_cli_startup.py checks every command's help).
from app.services.catalog import (
    ANALYSIS_DEFAULTS,
    BUILTIN_ALIASES,
    CONFIGS,
    SAMPLING_DEFAULTS,
    analysis_knob,
    config_knob,
    rl_knob,
)
from gmts_core.config import DEFAULT_METHODS

if TYPE_CHECKING:
    from app.services.container import Services
    from app.services.model_registry import LoadedModel
    from app.services.policy import LimitsPolicy
    from gmts_core.errors import GMTSError

Json = dict[str, Any]


@lru_cache(maxsize=1)
def services() -> Services:
    """The application services the CLI commands call (settings from the GMTS_* environment)."""
    from app.core.config import Settings
    from app.services.container import build_services

    return build_services(Settings())


def cli_limits() -> LimitsPolicy:
    """The CLI's own limits policy: larger than a server's, any model folder or hub id."""
    from app.services.policy import LimitsPolicy

    return LimitsPolicy.cli(services().settings)


def load_cli_model(name: str) -> LoadedModel:
    """An alias, a local folder or a hub id (the CLI user may name any folder), through the
    model registry every front end uses."""
    models = services().models
    return models.load(models.resolve(name, any_source=True))


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
) -> Json:
    """The request fields of one group from CLI flags: given answers or sampling, explicit
    rewards or a rule (the single form of the body of ``POST /v1/analyze``)."""
    explicit = parse_rewards(rewards)
    if explicit is None and reference is None:
        raise typer.BadParameter("give --rewards or --reference (with --reward-kind)")
    fields: Json = {"prompt": prompt, "temperature": temperature, "seed": seed}
    if answers:
        fields["answers"] = list(answers)
    else:
        fields.update(num_samples=num_samples, top_p=top_p, max_new_tokens=max_new_tokens)
    if explicit is not None:
        fields["rewards"] = explicit
    else:
        fields["reward"] = {"kind": reward_kind, "reference": reference}
    return fields


def echo_body(body: Json, as_json: bool, render: Callable[[Json, Console], None]) -> None:
    """Print a response body: its JSON (``--json``, exactly the API's), else ``render``'s view."""
    if as_json:
        typer.echo(json.dumps(body, ensure_ascii=False))
    else:
        render(body, Console())


def progress_console() -> Console:
    """Where long commands report progress: stderr, so stdout keeps only the result."""
    return Console(stderr=True)


def progress_lines(console: Console) -> Callable[[int, int, str], None]:
    """A progress callback that prints ``[done/total] label`` and flushes, once per call: what
    a long command prints when its progress stream is not a terminal (a log or a pipe sees each
    step as it ends, not one bar redrawn with carriage returns, or nothing until the end)."""

    def tick(done: int, total: int, label: str) -> None:
        console.print(f"[{done}/{total}] {label}", markup=False, highlight=False, soft_wrap=True)
        console.file.flush()

    return tick


def fail(exc: GMTSError) -> typer.Exit:
    """Print a library error plainly and return the exit to raise."""
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


# --- options shared by `analyze`, `gradcheck` and `analyze-file` ------------------------------


def knob_option(knob: tuple[str, dict[str, float]], *decls: str, note: str = "") -> Any:
    """An option for a documented knob (help, bounds): its help and its range (click's ranges
    are closed, so a ``gt`` bound is checked by the request model, which says so)."""
    help_text, bounds = knob
    low, high = bounds.get("ge", bounds.get("gt")), bounds.get("le", bounds.get("lt"))
    return typer.Option(*decls, help=f"{help_text} {note}".strip(), min=low, max=high)


def analysis_option(name: str, *decls: str, note: str = "") -> Any:
    """The option of the analysis knob ``name``, as documented once on AnalysisConfig."""
    return knob_option(analysis_knob(name), *decls, note=note)


def rl_option(name: str) -> Any:
    """The option of the GRPO knob ``name``, as documented once on RLConfig."""
    return knob_option(rl_knob(name))


def config_option(config: str, name: str, *decls: str, note: str = "") -> Any:
    """The option of the knob ``name`` of the config ``config`` (a key of ``CONFIGS``:
    sampling, compare, demo_eval, demo_train), as documented once on that dataclass."""
    return knob_option(config_knob(CONFIGS[config], name), *decls, note=note)


ModelOpt = Annotated[
    str,
    typer.Option(help=f"Alias ({', '.join(BUILTIN_ALIASES)}), local folder, .gguf file or hub id."),
]
PromptOpt = Annotated[str, typer.Option(help="The prompt text.")]
AnswerOpt = Annotated[list[str] | None, typer.Option(help="A given answer (repeat); else sample.")]
NumSamplesOpt = Annotated[int, config_option("sampling", "num_samples", "-n", "--num-samples")]
RewardsOpt = Annotated[str | None, typer.Option(help="Explicit rewards, e.g. 1,0,0,1.")]
RewardKindOpt = Annotated[str, typer.Option(help="numeric | final_number | exact | regex | math")]
ReferenceOpt = Annotated[str | None, typer.Option(help="Reference answer for the rule.")]
RatioOpt = Annotated[float, analysis_option("ratio")]
AdvantageOpt = Annotated[str, analysis_option("advantage")]
AggregationOpt = Annotated[str, analysis_option("loss_aggregation")]
TemperatureOpt = Annotated[float, analysis_option("temperature")]
TopPOpt = Annotated[float, config_option("sampling", "top_p")]
MaxNewTokensOpt = Annotated[int, config_option("sampling", "max_new_tokens")]
SeedOpt = Annotated[int, config_option("sampling", "seed")]
TopAlternativesOpt = Annotated[int, analysis_option("top_alternatives")]
ChatTemplateOpt = Annotated[
    bool | None,
    analysis_option(
        "chat_template",
        "--chat-template/--no-chat-template",
        note="Default: the model's (on for smollm2-135m, off for the others).",
    ),
]
MethodsOpt = Annotated[
    list[str] | None,
    analysis_option(
        "methods",
        "--method",
        note=f"Repeat for several (default: {', '.join(DEFAULT_METHODS)}); `gmts methods` "
        "lists every registered one.",
    ),
]
ScopeOpt = Annotated[
    str | None,
    analysis_option(
        "scope",
        note="Default: batch; group when the only --method is gmts_paper or gmts_paper_verl.",
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
) -> Json:
    """The analysis knobs the CLI flags describe, as fields of an analyze request (without
    ``--scope`` the request's default applies: batch, or group for ``gmts_paper`` or
    ``gmts_paper_verl`` alone)."""
    selection: Json = {"ratio": ratio}
    if scope is not None:
        selection["scope"] = scope
    if methods:
        selection["methods"] = list(methods)
    fields: Json = {
        "temperature": temperature,
        "advantage": advantage,
        "loss_aggregation": aggregation,
        "selection": selection,
        "top_alternatives": top_alternatives,
        "chat_template": chat_template,
    }
    if seed:
        fields["seed"] = seed
    return fields


# --- option bundles: the analysis knobs (`analyze-file`), one group (`analyze`, `gradcheck`) ---

F = TypeVar("F", bound=Callable[..., Any])


def with_options(bundle: Callable[..., Json], name: str) -> Callable[[F], F]:
    """A decorator: ``command``'s parameter ``name`` becomes the options of ``bundle`` (each
    declared once, there), and ``command`` receives what ``bundle`` makes of them. Typer reads
    the signature this gives the command, so ``--help`` lists the options in that place."""

    def decorate(command: F) -> F:
        shared = inspect.signature(bundle).parameters
        hints = {
            **get_type_hints(bundle, include_extras=True),
            **get_type_hints(command, include_extras=True),
        }
        params: list[inspect.Parameter] = []
        for own, p in inspect.signature(command).parameters.items():
            options = shared.values() if own == name else [p]
            params += [q.replace(annotation=hints[q.name]) for q in options]

        @functools.wraps(command)
        def run(**options: Any) -> Any:
            options[name] = bundle(**{k: options.pop(k) for k in shared})
            return command(**options)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return cast(F, run)

    return decorate


def analysis_request(
    ratio: RatioOpt = ANALYSIS_DEFAULTS.ratio,
    scope: ScopeOpt = None,
    method: MethodsOpt = None,
    advantage: AdvantageOpt = ANALYSIS_DEFAULTS.advantage,
    aggregation: AggregationOpt = ANALYSIS_DEFAULTS.loss_aggregation,
    temperature: TemperatureOpt = ANALYSIS_DEFAULTS.temperature,
    top_alternatives: TopAlternativesOpt = ANALYSIS_DEFAULTS.top_alternatives,
) -> Json:
    """The analysis fields of ``POST /v1/analyze`` from the options of that name."""
    return analysis_config(
        temperature, advantage, aggregation, ratio, scope, top_alternatives, methods=method
    )


@with_options(analysis_request, "analysis")
def group_request(
    prompt: PromptOpt,
    model: ModelOpt = "tiny-arith",
    answer: AnswerOpt = None,
    n: NumSamplesOpt = SAMPLING_DEFAULTS.num_samples,
    rewards: RewardsOpt = None,
    reward_kind: RewardKindOpt = "numeric",
    reference: ReferenceOpt = None,
    analysis: Json | None = None,
    top_p: TopPOpt = SAMPLING_DEFAULTS.top_p,
    max_new_tokens: MaxNewTokensOpt = SAMPLING_DEFAULTS.max_new_tokens,
    seed: SeedOpt = SAMPLING_DEFAULTS.seed,
    chat_template: ChatTemplateOpt = None,
) -> Json:
    """The body of ``POST /v1/analyze`` for one group, from the options of that name (without
    ``--[no-]chat-template`` the request leaves it out: the model's default applies)."""
    fields = dict(analysis or {}, chat_template=chat_template)
    if chat_template is None:
        del fields["chat_template"]
    if seed:  # the analysis' seed too (the random method), as the API takes it
        fields["seed"] = seed
    sampling = (fields["temperature"], top_p, max_new_tokens, seed)
    group = group_from_flags(prompt, answer, n, *sampling, rewards, reward_kind, reference)
    return {"model": model, **group, **fields}
