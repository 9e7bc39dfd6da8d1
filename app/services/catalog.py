"""What the library offers, listed once for every front end: methods, rules, defaults, limits.

The API's ``GET /v1/capabilities`` returns :func:`capabilities`; the UI's local backend calls
it directly and its remote backend asks the server, so dropdowns always list what the serving
process has registered. The demo task's example prompts and problems are listed here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gmts_core.base_config import DemoEvalConfig, SamplingConfig, TrainConfig
from gmts_core.compare_config import CompareConfig
from gmts_core.config import DEFAULT_METHODS, AnalysisConfig, RLConfig
from gmts_core.demo import DEMO_ALIAS
from gmts_core.knobs import DEFAULT_GRADCHECK_MAX_TOKENS, SCOPES, knob_default, knob_info
from gmts_core.model.packaged import PACKAGED_MODELS, SMOLLM2
from gmts_core.tasks import word_arith
from gmts_core.tasks.arith import ArithProblem, ExamplePrompt, example_prompts, generate_problems

if TYPE_CHECKING:
    from app.core.config import Settings
    from app.schemas.methods import MethodOut
    from app.schemas.server import CapabilitiesResponse

# The registries (methods, advantages, aggregations, reward rules) and the response models are
# imported where they are listed: they import torch, and this module's knobs and defaults are read
# without it (`gmts <command> --help`, tests/app/cli/test_cli_startup.py).

BUILTIN_ALIASES: tuple[str, ...] = (DEMO_ALIAS, *PACKAGED_MODELS)
"""The models every server lists: the demo model and the packaged ones (installed or not)."""
GRADCHECK_MAX_TOKENS = DEFAULT_GRADCHECK_MAX_TOKENS
"""The most answer tokens a gradcheck takes unless asked for fewer (one backward pass each)."""
REAL_MODEL = SMOLLM2.alias
"""The bundled real pretrained model."""
WORD_ARITH_REWARD = word_arith.REWARD_RULE
"""The reward rule of the real model's task (natural-language arithmetic)."""
REAL_MODEL_RL_DEFAULTS = dict(SMOLLM2.rl_defaults)
"""A live-RL session's default batch on the real model (prompts, G, max new tokens)."""

ANALYSIS_DEFAULTS = AnalysisConfig()
"""The analysis knobs' defaults (ratio, scope, temperature, ...): every front end takes them from
here (tests/app/test_no_retyped_defaults.py)."""

SAMPLING_DEFAULTS = SamplingConfig()
"""How a group is sampled when the request says nothing (answers, max new tokens, seed)."""

CONFIGS: dict[str, type] = {
    "analysis": AnalysisConfig,
    "rl": RLConfig,
    "sampling": SamplingConfig,
    "compare": CompareConfig,
    "demo_eval": DemoEvalConfig,
    "demo_train": TrainConfig,
}
"""Every config dataclass of the library whose knobs a front end shows, by a short name."""

COMPARE_DEFAULTS = CompareConfig()
"""A comparison's knobs when nobody sets them (its GRPO recipe is ``COMPARE_DEFAULTS.rl``)."""


def config_knob(config: type, name: str) -> tuple[str, dict[str, float]]:
    """The help text and bounds of the knob ``name`` of the config dataclass ``config``."""
    return knob_info(config, name)


def config_default(config: type, name: str) -> Any:
    """The default of the knob ``name`` of the config dataclass ``config``."""
    return knob_default(config, name)


LIMIT_SETTINGS = (
    "max_prompt_chars",
    "max_answer_chars",
    "max_groups",
    "max_answers",
    "max_new_tokens",
    "max_total_tokens",
    "max_top_alternatives",
    "max_step_prompts",
    "max_step_answers",
    "max_sessions",
    "max_session_steps",
    "gradcheck_max_parameters",
)
"""The request limits a client may want to know before it asks (each a GMTS_* setting)."""


def rl_knob(name: str) -> tuple[str, dict[str, float]]:
    """The help text and bounds of the GRPO knob ``name`` (documented once on RLConfig)."""
    return knob_info(RLConfig, name)


def analysis_knob(name: str) -> tuple[str, dict[str, float]]:
    """The help text and bounds of the analysis knob ``name`` (documented once on
    AnalysisConfig)."""
    return knob_info(AnalysisConfig, name)


def analysis_knob_default(name: str) -> Any:
    """The default of the analysis knob ``name``."""
    return getattr(ANALYSIS_DEFAULTS, name)


def method_infos() -> list[MethodOut]:
    """Every registered method with its one-line description and citation."""
    from app.services.methods import list_method_infos
    from app.services.responses import method_out

    return [method_out(m) for m in list_method_infos()]


def capabilities(settings: Settings) -> CapabilitiesResponse:
    """The registries of this process and the limits of ``settings``."""
    from app.schemas.server import CapabilitiesResponse
    from gmts_core.methods.advantages import ADVANTAGES
    from gmts_core.methods.aggregation import AGGREGATIONS
    from gmts_core.methods.rewards import list_rewards

    return CapabilitiesResponse(
        methods=method_infos(),
        default_methods=list(DEFAULT_METHODS),
        reward_rules=list_rewards(),
        advantages=ADVANTAGES.names(),
        loss_aggregations=AGGREGATIONS.names(),
        scopes=list(SCOPES),
        limits={name: int(getattr(settings, name)) for name in LIMIT_SETTINGS},
    )


def demo_examples() -> list[ExamplePrompt]:
    """The demo task's example prompts (carry, no carry, ...), each with its reference."""
    return example_prompts()


def demo_problems(n: int, seed: int = 0, split: str = "heldout") -> list[ArithProblem]:
    """``n`` seeded problems of the demo task's ``split``."""
    return generate_problems(n, seed=seed, split=split)
