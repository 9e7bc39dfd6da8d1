"""The Compare and proxy-check tabs without a browser: a compare JSON back into figures and the
final table, and gradcheck bodies into requests, scatters and the fidelity table."""

from __future__ import annotations

import dataclasses
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from app.palette import method_color
from app.reports.compare_report import table_header, table_rows
from app.schemas.gradcheck import GradcheckRequest
from app.services.compare import load_compare_file, result_from_dict
from app.services.container import build_services
from app.services.responses import analysis_json, as_json, gradcheck_response
from app.ui.tabs.compare import view as compare
from app.ui.tabs.proxy import view as proxy
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.config import RLConfig
from gmts_core.errors import InvalidInputError, LimitExceededError
from gmts_core.experiments.compare import CompareConfig, run_compare
from gmts_core.experiments.gradcheck import gradcheck
from gmts_core.model.loading import load_model
from tests.app.api_helpers import TINY, make_settings


class _Table(HTMLParser):
    """The header and rows of the first <table> in an HTML fragment, as text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse_table(fragment: str) -> tuple[list[str], list[list[str]]]:
    parser = _Table()
    parser.feed(fragment)
    return parser.rows[0], parser.rows[1:]


@pytest.fixture(scope="module")
def tiny_lm(model_root: Path) -> Any:
    return load_model(model_root / TINY, name=TINY)


@pytest.fixture(scope="module")
def compare_json(tiny_lm: Any) -> dict[str, Any]:
    """A real (tiny) compare run, through JSON as `gmts compare --out` writes it."""
    rl = dataclasses.replace(RLConfig(), group_size=2, prompts_per_step=1, max_new_tokens=4)
    config = CompareConfig(
        methods=("entropy", "gmts"), steps=2, seeds=2, eval_every=1, eval_problems=3, rl=rl
    )
    return json.loads(json.dumps(run_compare(tiny_lm, config).to_dict()))


def test_compare_json_round_trips(compare_json: dict[str, Any]) -> None:
    result = result_from_dict(compare_json)
    assert json.loads(json.dumps(result.to_dict())) == compare_json
    assert result.config.rl.group_size == 2 and result.config.methods == ("entropy", "gmts")


def test_compare_view_has_table_and_bands_per_method(compare_json: dict[str, Any]) -> None:
    result = result_from_dict(compare_json)
    summary, table, acc, wasted, reward, loss = compare.compare_view(result)
    assert "2 steps × 2 seed(s)" in summary and TINY in summary
    header, rows = parse_table(table)
    assert header == table_header(result) and rows == table_rows(result)
    for fig in (acc, reward, wasted, loss):
        names = [t.name for t in fig.data if t.showlegend is not False]
        assert names == ["entropy", "gmts"]  # each a mean line, plus its std band
    means = [t for t in reward.data if t.name == "gmts"][0]
    runs = [r["reward"] for r in compare_json["runs"] if r["method"] == "gmts"]
    assert list(means.y) == pytest.approx([(a + b) / 2 for a, b in zip(*runs, strict=True)])
    assert list(acc.data[1].x) == [0, 1, 2]  # evaluated every step
    # every point says on hover that it is a mean over the seeds, not one seed's value
    for fig in (acc, reward, wasted, loss):
        lines = [t for t in fig.data if t.showlegend is not False]
        assert all(t.hovertemplate.startswith(f"{t.name}: mean of 2 seeds") for t in lines)


def test_table_wasted_share_is_what_the_chart_draws(compare_json: dict[str, Any]) -> None:
    result = result_from_dict(compare_json)
    summary, table, _acc, wasted, *_ = compare.compare_view(result)
    _header, rows = parse_table(table)
    for method, cell in ((row[0], row[-1]) for row in rows):
        line = [t for t in wasted.data if t.name == method][0]
        ys = list(line.y)
        peak = max(range(len(ys)), key=ys.__getitem__)
        assert cell == f"{sum(ys) / len(ys):.2f} (peak {ys[peak]:.2f} at step {line.x[peak]})"
    assert all(sentence in summary for sentence in result.conclusions())
    assert "t intervals over seeds and held-out problems" in summary


def test_downloads_are_the_json_and_a_self_contained_page(compare_json: dict[str, Any]) -> None:
    json_path, html_path = compare.write_downloads(result_from_dict(compare_json))
    assert json.loads(json_path.read_text()) == compare_json
    page = html_path.read_text()
    assert "plotly" in page and "width=device-width" in page
    result = result_from_dict(compare_json)
    assert parse_table(page[page.index("<table") :]) == (table_header(result), table_rows(result))


def test_bad_files_say_what_is_wrong(tmp_path: Path, compare_json: dict[str, Any]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="not JSON"):
        load_compare_file(bad)
    bad.write_text(json.dumps({"model": "x"}))
    with pytest.raises(InvalidInputError, match="missing config, runs, start_accuracy"):
        load_compare_file(bad)
    no_gmts = {**compare_json, "runs": [r for r in compare_json["runs"] if r["method"] != "gmts"]}
    bad.write_text(json.dumps(no_gmts))
    with pytest.raises(InvalidInputError, match="no runs of method 'gmts'"):
        load_compare_file(bad)
    scores = json.loads(json.dumps(compare_json))
    scores["runs"][0]["final_per_problem"] = [2.0] * 3  # not a score in [0, 1]
    bad.write_text(json.dumps(scores))
    with pytest.raises(InvalidInputError, match="per-problem scores in \\[0, 1\\]"):
        load_compare_file(bad)
    seeds = {
        **compare_json,
        "runs": [r for r in compare_json["runs"] if r != compare_json["runs"][-1]],
    }
    bad.write_text(json.dumps(seeds))
    with pytest.raises(InvalidInputError, match="other seeds"):
        load_compare_file(bad)


def test_compare_form_makes_a_valid_config() -> None:
    config = compare.form_config(["gmts", "random"], steps=3, group_size=4.0)
    assert config.methods == ("gmts", "random") and config.rl.group_size == 4
    assert isinstance(config.rl.group_size, int)  # a slider's float becomes the knob's type
    # the tab's preset: paired seeds, the Train tab's classroom recipe
    assert (config.seeds, config.rl.max_new_tokens) == (2, 48)
    assert config.rl.learning_rate == 1.5e-4 and config.rl.prompts_per_step == 32
    with pytest.raises(InvalidInputError, match="at least one method"):
        compare.form_config([])


def test_compare_runs_keep_the_server_limits(model_root: Path) -> None:
    service = build_services(
        make_settings(model_root, max_step_answers=8, max_new_tokens=16)
    ).compare
    form: dict[str, Any] = {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 16}
    methods = ["entropy", "gmts"]
    service.check_limits(compare.form_config(methods, **form))  # 8 answers of 16 tokens: within
    with pytest.raises(LimitExceededError, match="GMTS_MAX_STEP_ANSWERS"):
        service.check_limits(compare.form_config(methods, **{**form, "prompts_per_step": 3}))
    with pytest.raises(LimitExceededError, match="GMTS_MAX_NEW_TOKENS"):
        service.check_limits(compare.form_config(methods, **{**form, "max_new_tokens": 20}))
    too_many = compare.form_config(methods, **{**form, "prompts_per_step": 3})
    with pytest.raises(LimitExceededError, match="GMTS_MAX_STEP_ANSWERS"):  # before any model work
        service.run("no-such-model", too_many)


# --- the proxy check ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def explore_result(tiny_lm: Any) -> dict[str, Any]:
    groups = [
        GroupInput("Q: 1+1=?\nA:", answers=[" 2", " 3 or 4"], rewards=[1.0, 0.0]),
        GroupInput("Q: 2+2=?\nA:", answers=[" 4 is it", " 4", " 5"], rewards=[1.0, 1.0, 0.0]),
    ]
    return analysis_json(analyze(tiny_lm, groups, AnalysisConfig(ratio=0.3, scope="group")))


def test_gradcheck_request_takes_the_drilled_group(explore_result: dict[str, Any]) -> None:
    body = proxy.gradcheck_request(explore_result, 1, 128)
    req = GradcheckRequest.model_validate(body)  # a valid API body
    assert req.answers == [" 4 is it", " 4", " 5"] and req.rewards == [1.0, 1.0, 0.0]
    assert req.selection.ratio == 0.3 and req.selection.scope == "group" and req.max_tokens == 128
    with pytest.raises(InvalidInputError, match="Explore"):
        proxy.gradcheck_request(None, 0, 128)
    emptied = json.loads(json.dumps(explore_result))
    emptied["groups"][0]["answers"][1]["text"] = ""
    with pytest.raises(InvalidInputError, match="answer\\(s\\) 1 are empty"):
        proxy.gradcheck_request(emptied, 0, 128)


@pytest.fixture(scope="module")
def gradcheck_body(tiny_lm: Any) -> dict[str, Any]:
    group = GroupInput("Q: 2+2=?\nA:", answers=[" 4 is it", " 4", " 5"], rewards=[1.0, 1.0, 0.0])
    return as_json(
        gradcheck_response(gradcheck(tiny_lm, [group], AnalysisConfig(top_alternatives=0)))
    )


def test_scatter_is_log_log_per_method_without_zero_points(gradcheck_body: dict) -> None:
    fig = proxy.proxy_scatter(gradcheck_body)
    methods = proxy.scatter_methods(gradcheck_body)
    assert "all" not in methods and {"entropy", "gmts", "surprisal"} <= set(methods)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    tokens = [t for a in gradcheck_body["answers"] for t in a["tokens"]]
    gmts_traces = fig.data[2 * methods.index("gmts") : 2 * methods.index("gmts") + 2]
    points = sum(len(t.x) for t in gmts_traces)
    positive = [t for t in tokens if t["true_grad_norm"] > 0 and t["scores"]["gmts"] > 0]
    assert 0 < points == len(positive) <= len(tokens)
    assert len(gmts_traces[1].x) == sum(t["selected"]["gmts"] for t in positive)


def test_fidelity_table_and_summary(gradcheck_body: dict) -> None:
    import pandas as pd

    summary, table, _fig = proxy.proxy_view(gradcheck_body)
    fid = gradcheck_body["fidelity"]
    assert table.count("data-label='cosine to full gradient'") == len(fid["spearman"])
    frame = pd.DataFrame(proxy.fidelity_rows(fid), columns=proxy.FIDELITY_HEADERS)
    assert frame["method"].tolist() == list(fid["spearman"])
    row = frame.set_index("method").loc["all"]
    assert row["cosine to full gradient"] == "1" and row["true norm kept"] == "1"
    assert "<th scope='row'>all</th><td data-label='Spearman (all tokens)'>" in table
    assert f"{fid['num_tokens']} answer tokens" in summary


def test_one_seed_shows_no_spread(compare_json: dict[str, Any]) -> None:
    """With one seed a std is no spread: no '±' in the table, no band in the charts."""
    one = {**compare_json, "config": {**compare_json["config"], "seeds": 1}}
    one["runs"] = [r for r in compare_json["runs"] if r["seed"] == 0]
    result = result_from_dict(one)
    assert all("±" not in cell for row in table_rows(result) for cell in row)
    _, _, acc, *_ = compare.compare_view(result)
    bands = [t for t in acc.data if t.fill == "toself"]
    assert bands and all(len(t.x) == 0 for t in bands)
    assert "one seed" in acc.layout.title.text
    assert "one seed's run" in [t for t in acc.data if t.name == "gmts"][0].hovertemplate
    many = compare.compare_view(result_from_dict(compare_json))[2]
    assert all(len(t.x) > 0 for t in many.data if t.fill == "toself")
    assert {t.line.color for t in many.data if t.name == "gmts"} == {method_color("gmts")}


def test_one_seed_gives_no_verdict_in_the_tab(compare_json: dict[str, Any]) -> None:
    # one seed whose gmts run beats entropy on every problem: still no verdict (issue 46)
    one = json.loads(json.dumps(compare_json))
    one["config"]["seeds"] = 1
    one["runs"] = [r for r in one["runs"] if r["seed"] == 0]
    for r in one["runs"]:
        r["final_per_problem"] = [1.0] * 3 if r["method"] == "gmts" else [0.0] * 3
    result = result_from_dict(one)
    summary, table, *_ = compare.compare_view(result)
    assert "no verdict" in summary and "this run's weights" in summary
    _header, rows = parse_table(table)
    assert "one seed: no verdict" in rows[1][3]
    for word in ("separable", "is better", "differs", "within noise"):
        assert word not in summary and word not in table


def test_the_tab_points_to_the_cli_when_the_advice_asks_for_more_seeds() -> None:
    from types import SimpleNamespace

    def stub(needed: int | None) -> Any:
        row = {"power": {"seeds_needed": needed}}
        config = CompareConfig(methods=("entropy", "gmts"), seeds=2, seed_offset=0)
        return SimpleNamespace(table=lambda: [{"power": None}, row], config=config)

    note = compare.more_seeds_note(stub(31))
    assert "up to 31 seeds" in note and "gmts compare --methods entropy,gmts --seeds 31" in note
    assert "--seed-offset 2" in note  # fresh seeds, not the ones this compare already used
    assert compare.more_seeds_note(stub(compare.MAX_TAB_SEEDS)) == ""
    assert compare.more_seeds_note(stub(None)) == ""
