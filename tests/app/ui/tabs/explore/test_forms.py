"""The UI's form logic (no Gradio): requests built from form values, the batch view's parts."""

from __future__ import annotations

import pytest

from app.core.config import Settings
from app.schemas.analyze_request import AnalyzeRequest
from app.services.catalog import capabilities
from app.ui import choices
from app.ui.tabs.explore import batch
from app.ui.tabs.explore import view as explore
from gmts_core.errors import InvalidInputError
from gmts_core.knobs import BUDGET_OVER
from gmts_core.methods.rewards import list_rewards
from gmts_core.methods.selection import list_methods

CAPS = capabilities(Settings())


def form(**values: object) -> explore.ExploreForm:
    base = dict(prompt="Q: 47+38=?\nA:", reference="85")
    base.update(values)
    return explore.ExploreForm(**base)  # type: ignore[arg-type]


def test_sampling_request_is_a_valid_api_body() -> None:
    body = explore.build_request(
        form(group_size=4, max_new_tokens=16, seed=3, ratio=0.3), choices.method_names(CAPS)
    )
    req = AnalyzeRequest.model_validate(body)  # the API's own schema accepts it
    assert (req.num_samples, req.max_new_tokens, req.seed) == (4, 16, 3)
    assert req.answers is None and req.reward is not None and req.reward.reference == "85"
    assert req.selection.ratio == 0.3
    assert req.selection.methods[:2] == ["entropy", "gmts"]
    assert set(req.selection.methods) == set(list_methods())


def test_the_advantage_and_aggregation_pickers_reach_the_request() -> None:
    """The reasons "why they differ" name |A| and w: Explore sets both, from the backend's
    registries."""
    assert CAPS.advantages and CAPS.loss_aggregations
    for adv in CAPS.advantages:
        for agg in CAPS.loss_aggregations:
            body = explore.build_request(form(advantage=adv, loss_aggregation=agg))
            req = AnalyzeRequest.model_validate(body)
            assert (req.advantage, req.loss_aggregation) == (adv, agg)


def test_the_budget_picker_reaches_the_request() -> None:
    """Explore's 'Budget counts' picker: every choice the library has reaches POST
    /v1/analyze's selection.budget_over, for the single and the batch form; the form's default
    is the request schema's (the library's)."""
    assert set(BUDGET_OVER) == {"trained", "content", "all"}
    for over in BUDGET_OVER:
        body = explore.build_request(form(budget_over=over))
        assert AnalyzeRequest.model_validate(body).selection.budget_over == over
        batch_body = batch.build_batch_request(form(budget_over=over), "Q: 1+1=?\nA:\n=> 2")
        assert AnalyzeRequest.model_validate(batch_body).selection.budget_over == over
    default = AnalyzeRequest.model_validate(explore.build_request(form()))
    assert default.selection.budget_over == explore.ExploreForm().budget_over
    bare = {"prompt": "x", "answers": ["a", "b"], "rewards": [1, 0]}  # no selection given
    assert (
        AnalyzeRequest.model_validate(bare).selection.budget_over == default.selection.budget_over
    )


def test_pasted_answers_replace_sampling_and_explicit_rewards_replace_the_rule() -> None:
    body = explore.build_request(
        form(answers_text=" 85\n\n 75\n", reward_kind=choices.EXPLICIT, explicit_rewards="1, 0")
    )
    req = AnalyzeRequest.model_validate(body)
    assert req.answers == [" 85", " 75"] and req.rewards == [1.0, 0.0]
    assert req.num_samples is None and req.reward is None


def test_answers_separated_by_dashes_keep_their_newlines() -> None:
    text = " step 1\n answer 85\n---\n answer 75\n"
    assert explore.parse_answers(text) == [" step 1\n answer 85", " answer 75"]
    assert explore.parse_answers("  \n") is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (dict(prompt="  "), "enter a prompt"),
        (dict(reference=""), "needs a reference"),
        (dict(reward_kind=choices.EXPLICIT, explicit_rewards="1, x"), "must be numbers"),
        (dict(reward_kind=choices.EXPLICIT, explicit_rewards=""), "one reward per answer"),
    ],
)
def test_user_mistakes_get_a_message(values: dict, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        explore.build_request(form(**values))


def test_dropdowns_read_the_backends_capabilities() -> None:
    assert choices.reward_choices(CAPS)[:-1] == list_rewards()
    assert choices.method_names(CAPS) == list_methods()
    mine = CAPS.methods[0].model_copy(update={"name": "mine", "description": "x"})
    caps = CAPS.model_copy(update={"methods": [mine], "reward_rules": ["r"]})
    assert choices.method_names(caps) == ["mine"] and choices.reward_choices(caps)[0] == "r"
    body = explore.build_request(form(method_a="gmts", method_b="mine"), ["entropy", "mine"])
    assert body["selection"]["methods"] == ["gmts", "mine", "entropy"]


def test_method_pickers_show_one_line_descriptions() -> None:
    labelled = choices.method_choices(CAPS)
    assert [value for _, value in labelled] == list_methods()
    by_name = {value: label for label, value in labelled}
    assert by_name["gtpo"].startswith("gtpo: GTPO") and "Clip-Cov" in by_name["clip_cov"]


def test_batch_text_round_trips_and_builds_a_batch_request() -> None:
    items = [("Q: 47+38=?\nA:", "85"), ("Q: 52-37=?\nA:", None)]
    assert batch.parse_batch(batch.format_batch(items)) == items
    body = batch.build_batch_request(form(reference="15"), batch.format_batch(items))
    req = AnalyzeRequest.model_validate(body)
    groups = req.group_requests()
    assert [g.prompt for g in groups] == [p for p, _ in items]
    assert [g.reward.reference for g in groups if g.reward] == ["85", "15"]
    assert all(g.num_samples == 8 for g in groups)


def test_demo_batch_has_four_prompts_with_references() -> None:
    items = batch.parse_batch(batch.demo_batch_text(seed=1))
    assert len(items) == batch.DEMO_BATCH_SIZE
    assert all(p.startswith("Q: ") and ref is not None and ref.lstrip("-").isdigit()
               for p, ref in items)  # fmt: skip


def test_batch_mistakes_get_a_message() -> None:
    with pytest.raises(InvalidInputError, match="separated by '---'"):
        batch.build_batch_request(form(), "  ")
    with pytest.raises(InvalidInputError, match="no reference"):
        batch.build_batch_request(form(reference=""), "Q: 1+1=?\nA:")
    with pytest.raises(InvalidInputError, match="reward rule"):
        batch.build_batch_request(form(reward_kind=choices.EXPLICIT), "Q: 1+1=?\nA:\n=> 2")


def test_overview_and_budget_quote_the_batch_summary() -> None:
    result = {
        "summary": {
            "budget_share": {"entropy": [0.75, 0.25], "gmts": [0.0, 1.0]},
            "wasted_share": {"entropy": 0.75, "gmts": 0.0},
        },
        "groups": [
            {"index": 0, "prompt": "a", "answers": [{"reward": 1, "advantage": 0}] * 2,
             "summary": {"zero_signal": True}},
            {"index": 1, "prompt": "b", "answers": [{"reward": 1, "advantage": 0.7}],
             "summary": {"zero_signal": False}},
        ],
    }  # fmt: skip
    rows = batch.overview_rows(result, ("entropy", "gmts"))
    assert rows[0][4] == "yes" and rows[0][5:] == ["75%", "0%"]
    assert rows[1][4] == "" and rows[1][5:] == ["25%", "100%"]
    fig = batch.budget_chart(result, ("entropy", "gmts"))
    assert [list(t.y) for t in fig.data] == [[0.75, 0.25], [0.0, 1.0]]
    assert "entropy 75%" in fig.layout.title.text
    assert [label for label, _ in batch.group_choices(result)] == ["group 0: a", "group 1: b"]
