"""The Runs tab in a real Chromium: pick a run, click a step in the table, see its groups with
highlighted tokens (a trainer log's applied mask; a real TRL dump analysed on demand)."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from playwright.sync_api import expect

from app.main import create_app
from app.services.runs import StepOptions
from gmts_core.methods.selection import top_k_count
from tests.app.api_helpers import LiveServer
from tests.browser.conftest import ui_settings
from tests.patience import PATIENCE_MS, PATIENCE_S
from tests.run_fixtures import FIXTURES, first_step_traits

pytestmark = pytest.mark.browser

DATA = Path(__file__).resolve().parents[1] / "data" / "runs"


def dump_fixtures() -> list[tuple[str, Path, tuple[int, int, int | None, bool]]]:
    """Every registered format whose fixture's first step carries a loss mask or per-token
    numbers of its own (registry-driven: tests/run_fixtures.py), with its first step's traits."""
    out = []
    for name, path in FIXTURES.items():
        traits = first_step_traits(path)
        if traits[2] is not None or traits[3]:
            out.append((name, path, traits))
    return out


@pytest.fixture(scope="module")
def runs_server(
    browser_model_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("ui-runs")
    for name in {"logged", "trl", *(path.name for _, path, _ in dump_fixtures())}:
        shutil.copytree(DATA / name, root / name)
    settings = ui_settings(browser_model_root, run_roots=[root])
    with LiveServer(create_app(settings)) as server:
        yield server


def open_runs_tab(chromium: Any, url: str, width: int = 1280, height: int = 900) -> Any:
    viewport = {"width": width, "height": height}
    page = chromium.new_context(viewport=viewport, accept_downloads=True).new_page()
    page.set_default_timeout(PATIENCE_MS)
    page.goto(url + "/ui/", wait_until="load")
    page.wait_for_selector("#analyze-btn")
    runs = page.get_by_role("tab", name="Runs")
    if runs.first.is_visible():
        runs.first.click()
    else:  # a phone's tab bar keeps it in its overflow menu ("More tabs")
        page.get_by_role("button", name="More tabs").click()
        page.locator(".overflow-dropdown button", has_text="Runs").click()
    page.wait_for_selector("#run-pick")
    return page


def step_cells(page: Any) -> Any:
    """The first cell (the step number) of every data row of the steps table."""
    return page.locator("#run-steps .virtual-row > [role=gridcell]:first-child")


def pick_run(page: Any, label: str, num_steps: int) -> None:
    page.locator("#run-pick input").click()
    page.get_by_role("option", name=label).click()
    page.wait_for_function(
        "document.querySelectorAll('#run-steps .virtual-row > [role=gridcell]:first-child').length"
        f" === {num_steps}"
    )


def click_step(page: Any, step: int) -> None:
    step_cells(page).filter(has_text=re.compile(rf"^\s*{step}\s*$")).first.click()


def wait_for_step(page: Any, step: int) -> None:
    """Wait until the step summary shows `step` with no event of the step view still pending
    (its progress overlay says "processing" or the place in the queue while one is)."""
    page.wait_for_function(
        "(step) => { const t = document.querySelector('#run-step-summary')?.innerText ?? '';"
        " return t.includes('Step ' + step + ' ') && !/processing|queue|waiting/.test(t); }",
        arg=step,
    )


def test_click_a_logged_step_shows_the_applied_mask(chromium: Any, runs_server: LiveServer) -> None:
    page = open_runs_tab(chromium, runs_server.url)
    pick_run(page, "logged (gmts_trainer_log, 2 steps)", 2)
    click_step(page, 1)
    page.wait_for_selector("#run-step-view .gmts-view .tok.sel-a")
    df = pd.read_parquet(DATA / "logged" / "gmts_selection" / "selection_00001.parquet")
    view = page.locator("#run-step-view")
    expect(view.locator(".tok")).to_have_count(len(df))
    expect(view.locator(".tok.sel-a")).to_have_count(int(df["selected"].sum()))  # applied
    expect(view.locator(".tok.sel-b")).to_have_count(int(df["selected_gmts"].sum()))
    expect(page.locator("#run-step-summary")).to_contain_text("Step 1", use_inner_text=True)
    page.wait_for_selector("#run-step-differences .why-differ")  # applied vs GMTS, by reason
    page.click("#run-next")
    page.wait_for_function(
        "(document.querySelector('#run-step-summary')?.innerText ?? '').includes('Step 2')"
    )
    df2 = pd.read_parquet(DATA / "logged" / "gmts_selection" / "selection_00002.parquet")
    page.wait_for_function(
        f"document.querySelectorAll('#run-step-view .tok').length === {len(df2)}"
    )


def test_a_trl_dump_step_is_analysed_and_highlighted(
    chromium: Any, runs_server: LiveServer
) -> None:
    page = open_runs_tab(chromium, runs_server.url)
    pick_run(page, "trl (trl, 3 steps)", 3)
    click_step(page, 2)
    wait_for_step(page, 2)
    page.wait_for_selector("#run-step-view .gmts-view .tok.sel-b")
    df = pd.read_parquet(DATA / "trl" / "completions" / "completions_00002.parquet")
    view = page.locator("#run-step-view")
    expect(view.locator(".gmts-view")).to_have_count(int(df["prompt"].nunique()))
    expect(view.locator(".ans-head")).to_have_count(len(df))
    expect(view.locator(".tok.sel-a").first).to_be_attached()  # entropy's selection
    expect(page.locator("#run-step-summary")).to_contain_text("Step 2", use_inner_text=True)


TIPS_JS = """() => [...document.querySelectorAll('#run-step-view .tok[data-tip]')]
    .map(t => t.getAttribute('data-tip'))"""


@pytest.mark.parametrize(("width", "height"), [(1366, 900), (390, 844)])
def test_tooltip_ranks_fit_their_labels(
    chromium: Any, runs_server: LiveServer, width: int, height: int
) -> None:
    """A TRL step is ranked over the step (batch scope): every tooltip says so, and no rank is
    larger than the token count it names (it said "within answer #1 of 19 tokens: entropy
    #22")."""
    page = open_runs_tab(chromium, runs_server.url, width, height)
    pick_run(page, "trl (trl, 3 steps)", 3)
    click_step(page, 2)
    wait_for_step(page, 2)
    page.wait_for_selector("#run-step-view .gmts-view .tok.sel-b")
    tips = page.evaluate(TIPS_JS)
    assert tips
    for tip in tips:
        label = next(line for line in tip.split("\n") if line.startswith("rank "))
        assert "within answer" not in label, label
        count = re.search(r"of (\d+) tokens", label)
        assert count is not None, label
        ranks = [int(r) for r in re.findall(r"^  \S+: #(\d+)", tip, re.M)]
        assert ranks and all(1 <= r <= int(count.group(1)) for r in ranks), (label, ranks)
    page.context.close()


SUMMARY_STEPS = """() => {
  window.__steps = [];
  const look = () => {
    const t = document.querySelector('#run-step-summary')?.innerText ?? '';
    const m = t.match(/Step (\\d+) of/);
    if (m && window.__steps[window.__steps.length - 1] !== Number(m[1]))
      window.__steps.push(Number(m[1]));
  };
  new MutationObserver(look).observe(document.querySelector('#run-step-summary'),
    {subtree: true, childList: true, characterData: true});
}"""


def test_a_step_clicked_while_the_first_loads_is_the_one_shown(
    chromium: Any, runs_server: LiveServer
) -> None:
    """Opening a run shows its first step; a step clicked before that answer arrives is shown
    last, not overwritten by the first step's later answer. The first step is held in the
    server (its run overview waits) until the click has joined the queue, so the order is
    driven by events, not timing."""
    runs = runs_server.app.state.services.runs
    overview, calls = runs.overview, []
    holding, release = threading.Event(), threading.Event()

    def held_overview(run_id: str) -> Any:
        calls.append(run_id)
        if len(calls) == 2:  # the first step's (the run's own table was the first call)
            holding.set()
            release.wait(PATIENCE_S)
        return overview(run_id)

    page = open_runs_tab(chromium, runs_server.url)
    page.evaluate(SUMMARY_STEPS)
    runs.overview = held_overview
    try:
        pick_run(page, "trl (trl, 3 steps)", 3)
        assert holding.wait(PATIENCE_S)
        with page.expect_response(lambda r: "/queue/join" in r.url):
            click_step(page, 3)  # its event is in the server's queue once join answers
    finally:
        release.set()
        runs.overview = overview
    page.wait_for_function("window.__steps.includes(1) && window.__steps.includes(3)")
    wait_for_step(page, page.evaluate("window.__steps[window.__steps.length - 1]"))
    assert page.evaluate("window.__steps") == [1, 3]  # the clicked step is the one left shown
    df = pd.read_parquet(DATA / "trl" / "completions" / "completions_00003.parquet")
    expect(page.locator("#run-step-view .ans-head")).to_have_count(len(df))


# --- every reader's dumps: a run written by TRL's own GRPOTrainer, and verl/ROLL/AReaL/JSONL --


@pytest.fixture(scope="module")
def every_format_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.browser.trl_run import write_trl_run

    root = tmp_path_factory.mktemp("ui-every-format")
    write_trl_run(root / "grpo")
    for name in ("verl", "roll", "areal", "run.jsonl"):
        src = DATA / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


@pytest.fixture(scope="module")
def every_format_server(browser_model_root: Path, every_format_root: Path) -> Iterator[LiveServer]:
    settings = ui_settings(browser_model_root, run_roots=[every_format_root])
    with LiveServer(create_app(settings)) as server:
        yield server


def test_a_run_written_by_trl_shows_step_1_tokens_and_metrics_over_steps(
    chromium: Any, every_format_server: LiveServer, every_format_root: Path
) -> None:
    import time

    page = open_runs_tab(chromium, every_format_server.url)
    page.locator("#run-pick input").click()
    start = time.monotonic()
    page.get_by_role("option", name="grpo (trl, 3 steps)").click()
    # step 1 opens with the run: its tokens, marked by both methods, and why they differ (the
    # time is printed, not asserted: CI machines are shared; benchmarks measure it)
    page.wait_for_selector("#run-step-view .gmts-view .tok")
    print(f"TRL run: step 1's tokens after {time.monotonic() - start:.1f} s")  # noqa: T201
    expect(page.locator("#run-step-summary")).to_contain_text("Step 1", use_inner_text=True)
    df = pd.read_parquet(every_format_root / "grpo" / "completions" / "completions_00001.parquet")
    view = page.locator("#run-step-view")
    expect(view.locator(".ans-head")).to_have_count(len(df))
    expect(view.locator(".tok.sel-a").first).to_be_attached()
    expect(view.locator(".tok.sel-b").first).to_be_attached()
    page.wait_for_selector("#run-step-differences .why-differ")
    # metrics over steps: computed in the background, charted as they come (3 steps)
    page.wait_for_function(
        "(document.querySelector('#run-metrics-status')?.innerText ?? '')"
        ".includes('3 of 3 steps analysed')"
    )
    for plot in ("#run-coverage-plot", "#run-waste-plot", "#run-overlap-plot"):
        page.wait_for_function(
            f"document.querySelectorAll('{plot} .scatterlayer .trace').length >= 1"
        )
    points = page.locator("#run-coverage-plot .scatterlayer .trace").first.locator(".point")
    expect(points).to_have_count(3)


@pytest.mark.parametrize(
    ("label", "first"),
    [
        ("verl (verl, 3 steps)", 1),
        ("roll (roll, 3 steps)", 1),
        ("areal (areal, 3 steps)", 0),
        ("run.jsonl (jsonl, 3 steps)", 1),
    ],
)
def test_verl_roll_areal_and_jsonl_runs_show_their_tokens(
    chromium: Any, every_format_server: LiveServer, label: str, first: int
) -> None:
    page = open_runs_tab(chromium, every_format_server.url)
    page.locator("#run-pick input").click()
    page.get_by_role("option", name=label).click()
    page.wait_for_selector("#run-step-view .gmts-view .tok.sel-b")
    expect(page.locator("#run-step-summary")).to_contain_text(f"Step {first}", use_inner_text=True)
    page.wait_for_selector("#run-step-differences .why-differ")
    click_step(page, 2)
    page.wait_for_function(
        "(document.querySelector('#run-step-summary')?.innerText ?? '').includes('Step 2')"
    )
    expect(page.locator("#run-step-view .tok").first).to_be_attached()


PLOT_JS = """(id) => [...document.querySelector(id + ' .js-plotly-plot').data]
    .map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))"""


def test_what_the_trainer_logged_is_charted(chromium: Any, runs_server: LiveServer) -> None:
    """Picking the TRL run charts the entropy and reward TRL itself logged (its
    trainer_state.json) next to the reward GMTS read from the completions."""
    page = open_runs_tab(chromium, runs_server.url)
    pick_run(page, "trl (trl, 3 steps)", 3)
    page.wait_for_selector("#run-trainer-plot .js-plotly-plot .main-svg")
    traces = {t["name"]: t for t in page.evaluate(PLOT_JS, "#run-trainer-plot")}
    history = json.loads((DATA / "trl" / "trainer_state.json").read_text())["log_history"]
    logged = [h for h in history if "entropy" in h]
    entropy = traces["entropy (TRL log: entropy)"]
    assert entropy["x"] == [h["step"] for h in logged]
    assert entropy["y"] == [h["entropy"] for h in logged]
    assert "reward mean (GMTS, from the rollouts)" in traces
    # the entropy GMTS recomputes for the steps it analyses in the background joins it
    page.wait_for_function(
        "() => [...(document.querySelector('#run-trainer-plot .js-plotly-plot')?.data ?? [])]"
        ".some(t => (t.name ?? '').startsWith('entropy mean (GMTS'))"
    )
    # the note is another output of the same update: waited for, not read at once
    page.locator("#run-trainer-note", has_text="What TRL itself logged").wait_for()


def test_the_report_downloads_and_opens_offline(
    chromium: Any, runs_server: LiveServer, tmp_path: Path
) -> None:
    """'Download report (HTML)': the run and the step shown, in one file that opens with the
    network cut off, its tokens pinnable and its charts drawn from the inlined plotly.js."""
    page = open_runs_tab(chromium, runs_server.url)
    pick_run(page, "logged (gmts_trainer_log, 2 steps)", 2)
    click_step(page, 2)
    wait_for_step(page, 2)
    # the button names the step its file holds (the report follows the step shown)
    page.wait_for_function(
        "() => (document.querySelector('#run-download') || {}).innerText?.includes('step 2')"
    )
    shown = page.locator("#run-step-view .tok").count()
    with page.expect_download() as info:
        page.click("#run-download")
    saved = tmp_path / "report.html"
    info.value.save_as(saved)
    offline = chromium.new_context(offline=True).new_page()
    offline.set_default_timeout(PATIENCE_MS)
    offline.goto(saved.as_uri())
    expect(offline.locator("body")).to_contain_text("Step 2", use_inner_text=True)
    expect(offline.locator("#run-step-view .tok")).to_have_count(shown)
    offline.wait_for_selector(".chart .js-plotly-plot .scatterlayer .trace")  # drawn offline
    offline.locator("#run-step-view .tok").first.click()  # pinned, as in the tab
    offline.wait_for_selector("#gmts-pin.visible")
    offline.context.close()
    page.context.close()


# --- a trainer's per-token dump: masked tokens, the mismatch view, the dump's own numbers ----

TOKENS_JS = """() => [...document.querySelectorAll('#run-step-view .tok')].map(t => ({
    classes: [...t.classList], tip: t.getAttribute('data-tip'), text: t.innerText,
    level: parseFloat(t.style.getPropertyValue('--lv'))}))"""


def choose(page: Any, elem_id: str, label: str) -> None:
    page.locator(f"#{elem_id} label", has_text=label).click()


def test_a_dump_shows_masked_tokens_mismatch_and_its_own_numbers(
    chromium: Any, runs_server: LiveServer
) -> None:
    """prime-rl's export: a tool output (loss mask 0) is greyed with its text and a tooltip
    saying why, never marked; the tokens shade by the logged |Δ log p|; the dump's numbers
    stand beside GMTS's. miles' dump: the importance ratio against the model's recomputed
    trainer side, and said so. Then, on the same page, every format with a mask or numbers of
    its own from those numbers alone (no model: entropy vs gmts_entropy;
    check_every_dump_format)."""
    runs = runs_server.app.state.services.runs
    body = runs.step_view("prime_rl", 1, StepOptions(model="tiny-arith", numbers="logged"))
    dump = [t for g in body.logged or [] for a in g.answers for t in a.tokens]
    masked = sum(not t.trained for t in dump)
    page = open_runs_tab(chromium, runs_server.url)
    pick_run(page, "prime_rl (prime_rl, 3 steps)", 3)
    wait_for_step(page, 1)
    page.wait_for_selector("#run-step-view .tok.sel-b")
    tokens = page.evaluate(TOKENS_JS)
    grey = [t for t in tokens if "tok-untrained" in t["classes"]]
    assert len(grey) == masked > 0 and all(t["text"] for t in grey)
    assert not any(c.startswith(("sel-", "mark-")) for t in grey for c in t["classes"])
    assert all("loss mask 0 in the trainer's dump" in t["tip"] for t in grey)
    trained = [t for t in tokens if "tok-untrained" not in t["classes"]]
    assert all("logged by the trainer: " in t["tip"] and "GMTS recomputed" in t["tip"]
               for t in trained)  # fmt: skip
    summary = page.locator("#run-step-summary")
    for words in ("Logged: ", "Recomputed: ", "mismatch"):  # as they are, spaces included
        expect(summary).to_contain_text(re.compile(re.escape(words)), use_inner_text=True)
    # the mismatch as the shade: the largest logged |Δ log p| is the darkest token
    choose(page, "run-colour", "|Δ log p|")
    page.wait_for_selector("#run-step-view .legend-scale:has-text('|Δ log p|')")
    tokens = page.evaluate(TOKENS_JS)
    diffs = [abs(t.logged["logprob_diff"]) for t in dump if t.trained]
    darkest = max(range(len(diffs)), key=diffs.__getitem__)
    shaded = [t["level"] for t in tokens if "tok-untrained" not in t["classes"]]
    assert shaded[darkest] == 1.0 and min(shaded) == 0.0
    assert all(t["level"] == 0.0 for t in tokens if "tok-untrained" in t["classes"])
    # budget over content: the answers' EOS (the tokenizer's special token) leaves the budget
    eos_id = runs_server.app.state.services.models.tokenizer("tiny-arith").eos_token_id
    trained_n = sum(t.trained for t in dump)
    eos = sum(t.trained and t.id == eos_id for t in dump)
    assert eos > 0
    marked = f"#run-step-view .tok[data-id='{eos_id}']:is(.sel-a, .sel-b)"
    for rule, counted in (("content", trained_n - eos), ("trained", trained_n)):
        choose(page, "run-budget", rule)
        page.wait_for_function(
            "(k) => document.querySelectorAll('#run-step-view .tok.sel-a').length === k",
            arg=top_k_count(0.2, counted),
        )
        if rule == "content":
            expect(page.locator(marked)).to_have_count(0)
    # miles: rollout log-probs only; the trainer side is the model's, and the view says so
    choose(page, "run-colour", "importance ratio")
    page.locator("#run-pick input").click()
    page.get_by_role("option", name="miles (miles, 3 steps)").click()
    wait_for_step(page, 0)
    page.wait_for_selector("#run-step-view .legend-scale:has-text('importance ratio')")
    tips = [t["tip"] for t in page.evaluate(TOKENS_JS) if "tok-untrained" not in t["classes"]]
    assert tips and all("trainer side recomputed by the model" in tip for tip in tips)
    expect(page.locator("#run-step-summary")).to_contain_text(
        "trainer side recomputed by the model", use_inner_text=True
    )
    # the dump's numbers alone (no model, the selections they suffice for): every per-token
    # dump and every format with a loss mask, prime-rl's included
    check_every_dump_format(page, runs, "miles")
    page.context.close()


DUMP_FORMATS = {"prime_rl", "nemo_rl", "open_instruct", "slime", "miles"}


def show_run(page: Any, run: str, fmt: str, first: int, steps: int, mode: str) -> None:
    """Pick ``run`` (or keep it, if it is shown) and wait for its first step in ``mode``'s words
    (dump: the dump's own numbers; analysis: the model's) with no event pending."""
    label = f"{run} ({fmt}, {steps} steps)"
    if page.locator("#run-pick input").input_value() != label:
        page.locator("#run-pick input").click()
        page.get_by_role("option", name=label, exact=True).click()
    words = "the numbers the trainer" if mode == "dump" else "analysed now with the chosen model"
    page.wait_for_function(
        "([head, words]) => { const t = document.querySelector('#run-step-summary')?.innerText"
        " ?? ''; return t.includes(head) && t.includes(words)"
        " && !/processing|queue|waiting/.test(t); }",
        arg=[f"Step {first} of {run} ({fmt})", words],
    )


def assert_masked_tokens_greyed(name: str, tokens: list[Any], trained: list[bool]) -> None:
    """Every token shown, in order; exactly the untrained ones greyed, with their text and the
    tooltip saying why, none marked by any method."""
    assert ["tok-untrained" in t["classes"] for t in tokens] == [not t for t in trained], name
    grey = [t for t in tokens if "tok-untrained" in t["classes"]]
    assert all(t["text"] for t in grey), name
    assert not any(c.startswith(("sel-", "mark-")) for t in grey for c in t["classes"]), name
    assert all("loss mask 0 in the trainer's dump" in t["tip"] for t in grey), name


def check_every_dump_format(page: Any, runs: Any, shown: str) -> None:
    """Registry-driven, on the page given (showing run ``shown`` with the model's numbers):
    every format whose fixture carries a loss mask or its own per-token numbers, picked in turn
    from the dump's numbers alone (no model): every token shown, the untrained ones greyed with
    their text and why, never marked, counted nowhere (the summary's counts are the trained
    tokens'), each trained token's logged numbers in its tooltip, the selections the API's
    (none where the dump logs no entropy: NeMo-RL). A fixture that carries a mask but masks no
    token fails here."""
    from app.ui.token_numbers import logged_lines

    found = dump_fixtures()
    dumps = []
    for fmt, path, (first, steps, masked, _) in found:
        assert masked is None or masked > 0, f"{fmt}: its fixture masks no token"
        body = runs.step_view(path.name, first, StepOptions(model="tiny-arith", numbers="logged"))
        if body.mode == "dump":  # a GMTS trainer log is shown as its applied mask instead
            dumps.append((fmt, path.name, first, steps, body))
    assert DUMP_FORMATS <= {fmt for fmt, *_ in dumps}
    assert {"prime_rl", "nemo_rl", "slime", "miles"} <= {f for f, _, t in found if t[2]}
    dumps.sort(key=lambda d: d[1] != shown)  # the run shown first: switching re-shows it
    choose(page, "run-numbers", "logged by the trainer")
    for fmt, run, first, steps, body in dumps:
        show_run(page, run, fmt, first, steps, "dump")
        dump = [t.model_dump() for g in body.logged or [] for a in g.answers for t in a.tokens]
        trained = [t["trained"] is not False for t in dump]
        tokens = page.evaluate(TOKENS_JS)
        assert_masked_tokens_greyed(fmt, tokens, trained)
        assert not any("GMTS recomputed" in t["tip"] for t in tokens), fmt
        for on_page, tok in zip(tokens, dump, strict=True):
            if tok["trained"] is not False:
                lines = logged_lines(tok)
                assert lines and all(line in on_page["tip"] for line in lines), (fmt, on_page)
        for cls, method in (("sel-a", "entropy"), ("sel-b", "gmts_entropy")):
            want = sum(bool(t["selected"].get(method)) for t in dump)
            assert sum(cls in t["classes"] for t in tokens) == want, (fmt, method)
        summary = page.locator("#run-step-summary").inner_text()
        untrained = len(trained) - sum(trained)
        assert body.report.untrained_tokens == untrained and body.report.num_tokens == sum(trained)
        assert f"{sum(trained)} tokens;" in summary, (fmt, summary)
        if untrained:
            assert f"{untrained} tokens not trained (loss mask 0 in the dump)" in summary, fmt
