"""The Explore tab's logic, free of Gradio: form values -> API request -> views.

``build_request`` turns what a person typed into the exact JSON body of ``POST /v1/analyze``
(validated by the same schema as the API, so a typo gets the API's message), a backend runs it,
and ``explore_view`` arranges the result into HTML, figures and tables. Nothing here computes a
statistic: the numbers come from the analysis result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.services.catalog import ANALYSIS_DEFAULTS, SAMPLING_DEFAULTS
from app.ui import charts
from app.ui.choices import EXPLICIT
from app.ui.predict import with_predict_bar
from app.ui.render import Json, placeholder, render_result
from app.ui.tabs.learn import learn
from app.ui.why_differ import why_differ_html
from gmts_core.errors import InvalidInputError

ANSWER_SEPARATOR = re.compile(r"^\s*-{3,}\s*$", re.MULTILINE)


@dataclass
class ExploreForm:
    """Everything the Explore tab's controls hold (the knobs' defaults as documented on
    AnalysisConfig and SamplingConfig)."""

    prompt: str = ""
    model: str | None = None
    group_size: int = SAMPLING_DEFAULTS.num_samples
    temperature: float = ANALYSIS_DEFAULTS.temperature
    max_new_tokens: int = SAMPLING_DEFAULTS.max_new_tokens
    seed: int = SAMPLING_DEFAULTS.seed
    reward_kind: str = "numeric"  # a reward rule, or EXPLICIT
    reference: str = ""
    explicit_rewards: str = ""
    answers_text: str = ""  # pasted answers: one per line, or blocks separated by '---' lines
    ratio: float = ANALYSIS_DEFAULTS.ratio
    scope: str = ANALYSIS_DEFAULTS.scope
    method_a: str = "entropy"
    method_b: str = "gmts"
    top_alternatives: int = ANALYSIS_DEFAULTS.top_alternatives
    advantage: str = ANALYSIS_DEFAULTS.advantage
    loss_aggregation: str = ANALYSIS_DEFAULTS.loss_aggregation
    budget_over: str = ANALYSIS_DEFAULTS.budget_over  # which tokens a selection's budget counts


def parse_answers(text: str) -> list[str] | None:
    """Pasted answers: blocks separated by '---' lines if there are any, else one per line.

    Leading spaces are kept (a model's answer often starts with one); blank entries are dropped.
    Returns None when nothing was pasted (then answers are sampled).
    """
    text = text.replace("\r\n", "\n")
    if not text.strip():
        return None
    if ANSWER_SEPARATOR.search(text):
        parts = [p.strip("\n") for p in ANSWER_SEPARATOR.split(text)]
    else:
        parts = text.split("\n")
    answers = [p for p in parts if p.strip()]
    return answers or None


def parse_rewards(text: str) -> list[float]:
    """Explicit rewards separated by commas, spaces or newlines."""
    items = [v for v in re.split(r"[,\s;]+", text.strip()) if v]
    if not items:
        raise InvalidInputError("give one reward per answer, e.g. 1, 0, 0, 1")
    try:
        return [float(v) for v in items]
    except ValueError:
        raise InvalidInputError(
            f"rewards must be numbers separated by commas, got {text!r}"
        ) from None


def methods_for(a: str, b: str, available: Sequence[str] = ()) -> list[str]:
    """Methods to request: A and B first, then every other one the backend offers (so switching
    A/B needs no re-run)."""
    return list(dict.fromkeys([a, b, *available]))


def _reward_fields(form: ExploreForm) -> dict[str, Any]:
    """Explicit rewards, when typed, win over the reward rule (``reward_note`` says which)."""
    if form.reward_kind == EXPLICIT or form.explicit_rewards.strip():
        return {"rewards": parse_rewards(form.explicit_rewards)}
    if not form.reference.strip():
        raise InvalidInputError(
            f"the {form.reward_kind!r} rule needs a reference answer (or choose {EXPLICIT!r})"
        )
    return {"reward": {"kind": form.reward_kind, "reference": form.reference.strip()}}


def rule_overridden(form: ExploreForm) -> bool:
    """Explicit rewards were typed while a reward rule is chosen (the rewards win)."""
    return form.reward_kind != EXPLICIT and bool(form.explicit_rewards.strip())


def reward_note(form: ExploreForm) -> str:
    """Which rewards an analysis used, in words (shown with the result)."""
    if form.reward_kind == EXPLICIT or form.explicit_rewards.strip():
        note = f"Rewards: the explicit rewards you entered ({form.explicit_rewards.strip()})"
        if form.reward_kind != EXPLICIT:
            note += f"; they take precedence over the {form.reward_kind!r} rule, which was not used"
        return note + "."
    return f"Rewards: the {form.reward_kind!r} rule with reference {form.reference.strip()!r}."


def common_fields(form: ExploreForm, available: Sequence[str] = ()) -> dict[str, Any]:
    """Request fields shared by the single and the batch form (``available``: the backend's
    selection methods)."""
    body: dict[str, Any] = {
        "temperature": float(form.temperature),
        "selection": {
            "ratio": float(form.ratio),
            "scope": form.scope,
            "methods": methods_for(form.method_a, form.method_b, available),
            "budget_over": form.budget_over,
        },
        "top_alternatives": int(form.top_alternatives),
        "advantage": form.advantage,
        "loss_aggregation": form.loss_aggregation,
    }
    if form.model:
        body["model"] = form.model
    return body


def sampling_fields(form: ExploreForm) -> dict[str, Any]:
    return {
        "num_samples": int(form.group_size),
        "max_new_tokens": int(form.max_new_tokens),
        "seed": int(form.seed),
    }


def build_request(form: ExploreForm, available: Sequence[str] = ()) -> Json:
    """The ``POST /v1/analyze`` body for one prompt (pasted answers or sampling)."""
    if not form.prompt.strip():
        raise InvalidInputError("enter a prompt (or pick an example)")
    body = common_fields(form, available)
    body["prompt"] = form.prompt
    answers = parse_answers(form.answers_text)
    body.update({"answers": answers} if answers else sampling_fields(form))
    body.update(_reward_fields(form))
    return body


@dataclass
class ExploreView:
    """Everything the Explore and Learn tabs show for one result."""

    tokens_html: str
    figures: dict[str, Any]
    summary_rows: list[list[str]]
    learn_html: str
    notes: list[str]
    why_html: str = ""  # why Method A and B differ (app.ui.why_differ)


def missing_methods(result: Json | None, methods: tuple[str, str]) -> list[str]:
    """The methods of ``methods`` the result was not computed with."""
    computed = (result or {}).get("settings", {}).get("methods", []) if result else []
    return [m for m in methods if m not in computed]


def learn_view(result: Json | None, method_a: str, method_b: str, group_index: int = 0) -> str:
    """The Learn tab's live card of a result (its placeholder when there is none yet)."""
    methods = (method_a, method_b)
    if not result or missing_methods(result, methods):
        return learn.learn_html(None, methods)
    return learn.learn_html(result, methods, group_index)


def explore_view(
    result: Json | None,
    method_a: str,
    method_b: str,
    color_by: str,
    group_index: int = 0,
    with_figures: bool = True,
    with_learn: bool = True,
) -> ExploreView:
    """Arrange a result (or nothing yet) for display (its charts only ``with_figures``, the
    Learn tab's card only ``with_learn``)."""
    methods = (method_a, method_b)
    learn_html = learn_view(result, method_a, method_b, group_index) if with_learn else ""
    if not result:
        msg = "Enter a prompt and press Analyze; the answers' tokens appear here."
        return ExploreView(placeholder(msg), {}, [], learn_html, [])
    missing = missing_methods(result, methods)
    if missing:
        msg = f"{', '.join(missing)} was not computed for this result: press Analyze again."
        return ExploreView(placeholder(msg), {}, [], learn_html, [])
    return ExploreView(
        tokens_html=with_predict_bar(
            render_result(result, methods, color_by, group_index), methods
        ),
        figures=charts.group_figures(result, methods, group_index) if with_figures else {},
        summary_rows=charts.summary_rows(result.get("summary") or {}, methods),
        learn_html=learn_html,
        notes=list(result.get("notes") or []),
        why_html=why_differ_html(result, methods),
    )
