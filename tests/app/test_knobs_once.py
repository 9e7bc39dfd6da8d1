"""Every knob once: each setting of every library config dataclass is a documented knob
(default, help, bounds), and the API schema, the CLI's options and the UI's controls show that
default, that help and those bounds, so no front end keeps a second default."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient

from app.cli import load_commands
from app.services.catalog import CONFIGS
from app.ui.tabs.explore.controls import config_slider
from app.ui.tabs.explore.view import ExploreForm
from app.ui.tabs.train.tab import help_of
from gmts_core.demo.train import FlawMix, ModelShape
from gmts_core.grpo.policy import PolicySettings
from gmts_core.knobs import is_knob, knob_default, knob_info

BOUND_KEYS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
NESTED = (FlawMix, ModelShape, PolicySettings)  # configs inside the configs


def _bounds(prop: dict[str, Any]) -> dict[str, float]:
    return {k: prop[v] for k, v in BOUND_KEYS.items() if v in prop}


def _options(command: str) -> dict[str, Any]:
    """The options of ``gmts COMMAND``, as its ``--help`` shows them (Typer's Click objects)."""
    group: Any = typer.main.get_command(load_commands())
    params = group.commands[command].params
    return {p.name: p for p in params if p.param_type_name == "option" and p.name}


def _check_option(option: Any, config: type, name: str, default: Any = None) -> None:
    help_text, bounds = knob_info(config, name)
    assert option.help is not None and option.help.startswith(help_text), (config, name)
    expected = knob_default(config, name) if default is None else default
    assert option.default == expected, (config, name)
    low, high = bounds.get("ge", bounds.get("gt")), bounds.get("le", bounds.get("lt"))
    assert (option.min, option.max) == (low, high), (config, name)  # the range --help shows


@pytest.mark.parametrize("config", [*CONFIGS.values(), *NESTED], ids=lambda c: c.__name__)
def test_every_field_of_every_config_is_a_documented_knob(config: type) -> None:
    for f in dataclasses.fields(config):
        assert is_knob(config, f.name), f"{config.__name__}.{f.name} is not a knob()"
        assert knob_info(config, f.name)[0].strip(), f"{config.__name__}.{f.name} has no help"


def test_api_schema_takes_sampling_and_rl_knobs(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    sampling, rl = CONFIGS["sampling"], CONFIGS["rl"]
    group = schemas["GroupRequest"]["properties"]
    for name in ("num_samples", "top_p", "max_new_tokens", "seed"):
        help_text, bounds = knob_info(sampling, name)
        prop = group[name]
        assert prop["description"].startswith(help_text), name
        assert f"Default: {knob_default(sampling, name)}" in prop["description"], name
        assert _bounds(prop.get("anyOf", [prop])[0]) == bounds, name
    knobs = schemas["SessionCreateRequest"]["properties"]
    rl_names = {f.name for f in dataclasses.fields(rl)}
    for name, prop in knobs.items():
        if name not in rl_names:
            continue
        help_text, bounds = knob_info(rl, name)
        assert prop["description"].startswith(help_text), name
        numeric = [p for p in prop.get("anyOf", [prop]) if p.get("type") in ("integer", "number")]
        if numeric:
            assert _bounds(numeric[0]) == bounds, name


def test_cli_options_take_the_knobs() -> None:
    analysis, sampling = CONFIGS["analysis"], CONFIGS["sampling"]
    analyze = _options("analyze")
    _check_option(analyze["n"], sampling, "num_samples")
    for name in ("top_p", "max_new_tokens", "seed"):
        _check_option(analyze[name], sampling, name)
    for name in ("temperature", "top_alternatives", "ratio"):
        _check_option(analyze[name], analysis, name)

    compare, rl = CONFIGS["compare"], CONFIGS["compare"]().rl
    options = _options("compare")
    for name in ("ratio", "steps", "seeds", "eval_every", "eval_problems", "task_mix"):
        _check_option(options[name], compare, name)
    _check_option(options["methods"], compare, "methods", ",".join(compare().methods))
    for name in ("group_size", "prompts_per_step", "inner_steps", "warmup_steps"):
        _check_option(options[name], CONFIGS["rl"], name, getattr(rl, name))
    _check_option(options["lr"], CONFIGS["rl"], "learning_rate", rl.learning_rate)

    train = CONFIGS["demo_train"]
    options = _options("train-demo")
    for name in ("seed", "steps", "batch_size", "lr"):
        _check_option(options[name], train, name)
    _check_option(options["flaw_rate"], FlawMix, "flaw_rate")

    evaluation = CONFIGS["demo_eval"]()
    options = _options("eval-demo")
    _check_option(options["num_prompts"], CONFIGS["demo_eval"], "num_prompts")
    _check_option(options["group_size"], sampling, "num_samples", evaluation.sampling.num_samples)
    _check_option(options["seed"], sampling, "seed", evaluation.sampling.seed)


def test_ui_controls_take_the_knobs() -> None:
    sampling, analysis = CONFIGS["sampling"](), CONFIGS["analysis"]()
    form = ExploreForm()
    assert (form.group_size, form.max_new_tokens, form.seed) == (
        sampling.num_samples, sampling.max_new_tokens, sampling.seed,
    )  # fmt: skip
    assert (form.temperature, form.ratio, form.scope) == (
        analysis.temperature, analysis.ratio, analysis.scope,
    )  # fmt: skip
    slider = config_slider(CONFIGS["sampling"], "max_new_tokens", 4, 256, step=4)
    help_text, _ = knob_info(CONFIGS["sampling"], "max_new_tokens")
    assert (slider.value, slider.info) == (sampling.max_new_tokens, help_text)
    for name in ("ratio", "group_size", "max_new_tokens"):
        assert help_of(name) == knob_info(CONFIGS["rl"], name)[0]


def test_one_default_for_the_number_of_answers_and_their_length() -> None:
    """The group size and answer length an analysis gets when nobody says: one value each,
    the SamplingConfig knob's, in the request model, the service, the CLI and the UI."""
    from app.schemas.analyze_request import DEFAULT_NUM_SAMPLES
    from app.services.analysis import DEFAULT_MAX_NEW_TOKENS

    sampling = CONFIGS["sampling"]()
    assert DEFAULT_NUM_SAMPLES == sampling.num_samples
    assert DEFAULT_MAX_NEW_TOKENS == sampling.max_new_tokens
    analyze = _options("analyze")
    assert (analyze["n"].default, analyze["max_new_tokens"].default) == (
        sampling.num_samples, sampling.max_new_tokens,
    )  # fmt: skip
    assert (ExploreForm().group_size, ExploreForm().max_new_tokens) == (
        sampling.num_samples, sampling.max_new_tokens,
    )  # fmt: skip
