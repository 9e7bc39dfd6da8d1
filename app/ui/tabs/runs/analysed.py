"""The Runs tab's analysed runs: `gmts analyze-run -o` folders, browsed without a model.

Pick an analysed run: its charts over steps and a summary in words; rank or filter every
answer (or the top tokens) across the run; open a step's groups, a group's answers and an
answer's tokens; download the whole view as one HTML file. A run still being written shows
its new steps within :data:`POLL_S` seconds (only the new steps' files are read).
"""

from __future__ import annotations

from typing import Any

import gradio as gr
from gradio.context import Context
from pydantic import BaseModel

from app.reports.analysed_report import (
    report_html,
    reward_entropy_figure,
    selection_figure,
    summary_text,
    tokens_html,
)
from app.schemas.analysed_runs import (
    AnalysedRunInfo,
    AnalysedRunsResponse,
    AnalysedStepsResponse,
    AnswerRowOut,
    AnswersResponse,
    GroupsResponse,
    TokensResponse,
)
from app.services.analysed_runs import ANSWER_ORDER_NAMES, TOKEN_ORDER_NAMES, compared_pair
from app.ui.client import M, expect
from app.ui.context import UIContext, call
from app.ui.downloads import write_download
from app.ui.render import Json
from gmts_core.errors import GMTSError

POLL_S = 5.0
GROUP_PAGE = 200  # groups shown at once (a step's others: the page buttons)
TOKEN_PAGE = 1000  # tokens of an answer shown at once (MAX_PAGE of the API)
ZERO_CHOICES = ("any group", "zero-signal groups only", "groups with signal only")
ORDER_CHOICES = [f"answers by {o}" for o in ANSWER_ORDER_NAMES] + [
    f"tokens by {o}" for o in TOKEN_ORDER_NAMES
]
ANSWER_COLS = ["step", "group", "answer", "reward", "advantage", "length", "disagreement", "text"]
TOKEN_COLS = ["step", "group", "answer", "position", "text", "entropy", "gamma", "score"]
GROUP_COLS = ["group", "answers", "reward_mean", "zero_signal", "disagreement", "prompt"]


def _rows(items: list[BaseModel], cols: list[str]) -> list[list[Any]]:
    def cell(v: Any) -> Any:
        return round(v, 4) if isinstance(v, float) else v

    return [[cell(getattr(item, c, None)) for c in cols] for item in items]


def page_note(what: str, offset: int, body: GroupsResponse | TokensResponse) -> str:
    """``groups 201-400 of 512``: which rows of how many a page shows."""
    rows = body.groups if isinstance(body, GroupsResponse) else body.tokens
    total = body.page.total
    if not rows:
        return f"no {what} here" + (f" ({total:,} in all)" if total else "")
    last = offset + len(rows)
    of = f" of {total:,}" if total is not None else ""
    return f"{what} {offset + 1:,}–{last:,}{of}"


def pair_choices(methods: list[str]) -> Any:
    """Every pair of the run's methods as "a vs b", the pair stored at analysis first."""
    stored = compared_pair(tuple(methods))
    pairs = [f"{a} vs {b}" for i, a in enumerate(methods) for b in methods[i + 1 :]]
    first = f"{stored[0]} vs {stored[1]}" if stored else None
    ordered = ([first] if first else []) + [p for p in pairs if p != first]
    return gr.update(choices=ordered, value=first)


def disagreement_note(pair: tuple[str, ...]) -> str:
    """What "disagreement" counted: the stored pair's column, or another pair's tokens."""
    if not pair:
        return " (disagreement: tokens the pair stored at analysis disagree on)"
    return (
        f" (disagreement of {pair[0]} vs {pair[1]}: tokens one selects and the other does not; "
        "for a pair other than the one stored at analysis it is counted from every token's "
        "selections, which reads the run's token files: seconds to minutes on a long run)"
    )


def _number(value: Any) -> str:
    return "—" if value is None else f"{value:.4g}"


def _table(items: list[Any], cols: list[str]) -> Any:
    return gr.update(value={"headers": cols, "data": _rows(items, cols) or [[None] * len(cols)]})


class _Handlers:
    def __init__(self, ctx: UIContext) -> None:
        self.backend = ctx.backend

    def q(self, body: type[M], kind: str, run_id: str = "", **params: Any) -> M:
        """The ``kind`` query's body, as its response model ``body``."""
        return expect(call(lambda: self.backend.analysed(kind, run_id, params)), body)

    def choices(self, wait: bool = True) -> list[str]:
        """The readable analysed runs (building the UI does not wait for them to be read:
        the first listing answers from what is indexed and starts the rest)."""
        try:
            body = self.backend.analysed("list", "", {"wait": wait})
            listing = expect(body, AnalysedRunsResponse)
        except GMTSError:
            return []
        return [r.id for r in listing.runs if r.readable]

    def refresh(self) -> Any:
        return gr.update(choices=self.choices())

    def open(self, run_id: str | None) -> tuple:
        if not run_id:
            empty = gr.update(choices=[], value=None)
            return (None, "", None, None, empty, None, None, empty)
        steps_body = self.q(AnalysedStepsResponse, "steps", run_id)
        steps = [r.step for r in steps_body.steps]
        body = steps_body.model_dump(mode="json")  # the charts and report draw it as the API sends
        return (
            body,
            summary_text(body),
            reward_entropy_figure(body),
            selection_figure(body),
            gr.update(choices=steps, value=steps[0] if steps else None),
            self.report(body, None, []),
            None,
            pair_choices(body["run"]["methods"]),
        )

    def poll(self, run_id: str | None, body: Json | None) -> tuple:
        """A growing run: the run's row (steps, last step) is compared first; every step is
        fetched and redrawn only when it changed."""
        if not run_id or body is None:
            return (gr.skip(),) * 5
        row, shown = self.q(AnalysedRunInfo, "run", run_id), body["run"]
        if all(getattr(row, k) == shown.get(k) for k in ("num_steps", "last_step", "num_tokens")):
            return (gr.skip(),) * 5
        new_body = self.q(AnalysedStepsResponse, "steps", run_id)
        steps = [r.step for r in new_body.steps]
        new = new_body.model_dump(mode="json")
        return (
            new,
            summary_text(new),
            reward_entropy_figure(new),
            selection_figure(new),
            gr.update(choices=steps),
        )

    def find(
        self, run_id: str | None, order: str, contains: str, zero: str, pair: str | None = None
    ) -> tuple:
        if not run_id:
            return _table([], ANSWER_COLS), ""
        kind, _, by = order.partition(" by ")
        if kind == "tokens":
            ranked = self.q(TokensResponse, "rank_tokens", run_id, by=by, limit=100)
            return _table(
                ranked.tokens, TOKEN_COLS
            ), f"the run's {len(ranked.tokens)} tokens with the highest {by}"
        zero_signal = {ZERO_CHOICES[1]: True, ZERO_CHOICES[2]: False}.get(zero)
        pair_names = tuple(pair.split(" vs ")) if pair and by == "disagreement" else ()
        body = self.q(
            AnswersResponse,
            "rank_answers",
            run_id,
            by=by,
            limit=100,
            contains=contains or None,
            zero_signal=zero_signal,
            **({"pair": ",".join(pair_names)} if pair_names else {}),
        )
        total = body.page.total
        if not total:
            return _table([], ANSWER_COLS), "no answer matches"
        note = f"{total:,} answers match; the first {len(body.answers)} by {by} are shown"
        if by == "disagreement":
            note += disagreement_note(pair_names)
        return _table(body.answers, ANSWER_COLS), note

    def groups(self, run_id: str | None, step: int | None, offset: int = 0) -> tuple:
        """A page of the step's groups (GROUP_PAGE of them from ``offset``), its note and the
        offset shown."""
        if not run_id or step is None:
            return _table([], GROUP_COLS), "", 0
        offset = max(0, int(offset))
        page = {"step": int(step), "limit": GROUP_PAGE}
        body = self.q(GroupsResponse, "groups", run_id, offset=offset, **page)
        total = body.page.total
        if total is not None and offset >= total > 0:  # past the last page: the last one
            offset = (total - 1) // GROUP_PAGE * GROUP_PAGE
            body = self.q(GroupsResponse, "groups", run_id, offset=offset, **page)
        return _table(body.groups, GROUP_COLS), page_note("groups", offset, body), offset

    def group_page(self, run_id: str | None, step: int | None, offset: int, move: int) -> tuple:
        return self.groups(run_id, step, int(offset or 0) + move * GROUP_PAGE)

    def pick_group(self, run_id: str | None, step: int | None, evt: gr.SelectData) -> Any:
        row = evt.row_value or []
        if not run_id or step is None or not row or row[0] is None:
            return _table([], ANSWER_COLS)
        body = self.q(AnswersResponse, "answers", run_id, step=int(step), group=int(row[0]))
        return _table(body.answers, ANSWER_COLS)

    def pick_answer(self, run_id: str | None, body: Json | None, evt: gr.SelectData) -> tuple:
        """A row of the answers or results table (step, group, answer first) -> its tokens."""
        row = evt.row_value or []
        if not run_id or body is None or len(row) < 3 or row[0] is None:
            return gr.skip(), gr.skip(), gr.skip()
        step, group, answer = (int(v) for v in row[:3])
        answers = self.q(AnswersResponse, "answers", run_id, step=step, group=group).answers
        shown = next(a for a in answers if a.answer == answer)
        return self.token_page(run_id, body, {"answer": shown.model_dump(mode="json")}, 0)

    def token_page(
        self, run_id: str | None, body: Json | None, shown: Json | None, at: int
    ) -> tuple:
        """The tokens of the shown answer from position ``at`` (TOKEN_PAGE of them), with
        "tokens 1,001-2,000 of 4,096" above them."""
        if not run_id or body is None or not shown:
            return gr.skip(), gr.skip(), gr.skip()
        a = AnswerRowOut.model_validate(shown["answer"])  # the state holds it as JSON
        step, group, answer = a.step, a.group, a.answer
        at = max(0, min(int(at), max(0, a.length - 1)))
        at -= at % TOKEN_PAGE
        page = self.q(
            TokensResponse,
            "tokens",
            run_id,
            step=step,
            group=group,
            answer=answer,
            offset=at,
            limit=TOKEN_PAGE,
        )
        tokens = [t.model_dump(mode="json") for t in page.tokens]  # the report draws JSON
        num = next((r["num_tokens"] for r in body["steps"] if r["step"] == step), None)
        view = (
            f"<p><b>Step {step}, group {group}, answer {answer}</b>: reward "
            f"{_number(a.reward)}, advantage {_number(a.advantage)}; "
            f"{page_note('tokens', at, page)}</p>"
            + tokens_html(tokens, body["run"]["methods"], num)
        )
        shown_answer = a.model_dump(mode="json")
        state = {"answer": shown_answer, "tokens": tokens, "offset": at}
        return view, self.report(body, shown_answer, tokens), state

    def token_move(
        self, run_id: str | None, body: Json | None, shown: Json | None, move: int
    ) -> tuple:
        at = int((shown or {}).get("offset", 0)) + move * TOKEN_PAGE
        return self.token_page(run_id, body, shown, at)

    def report(self, body: Json, answer: Json | None, tokens: list[Json]) -> str:
        return str(write_download(report_html(body, answer, tokens), "analysed-run", "html"))


def build_analysed_section(ctx: UIContext) -> None:
    """The analysed-runs section of the Runs tab (its own components and events)."""
    h = _Handlers(ctx)
    gr.Markdown(
        "Runs analysed ahead with `gmts analyze-run RUN -o FOLDER` (any size, on as many GPUs "
        "as you have), with the folder under `GMTS_RUN_ROOTS`: browsed from the stored "
        "numbers, no model needed."
    )
    with gr.Row():
        run = gr.Dropdown([], value=None, label="Analysed run", elem_id="analysed-pick")
        refresh = gr.Button("Refresh", elem_id="analysed-refresh", scale=0)
        download = gr.DownloadButton("Download report (HTML)", elem_id="analysed-download")
    status = gr.Markdown(elem_id="analysed-status")
    with gr.Row():
        plot_reward = gr.Plot(label="Reward and entropy", elem_id="analysed-reward-plot")
        plot_select = gr.Plot(label="Selections", elem_id="analysed-selection-plot")
    with gr.Row():
        order = gr.Dropdown(ORDER_CHOICES, value=ORDER_CHOICES[0], label="Rank across the run")
        contains = gr.Textbox(label="Answer text contains", elem_id="analysed-contains")
        zero = gr.Radio(list(ZERO_CHOICES), value=ZERO_CHOICES[0], label="Groups")
        pair = gr.Dropdown(
            [], value=None, label="Disagreement of", elem_id="analysed-pair", scale=0
        )
        find = gr.Button("Find", elem_id="analysed-find", variant="primary", scale=0)
    note = gr.Markdown(elem_id="analysed-note")
    results = gr.Dataframe(
        interactive=False, elem_id="analysed-results", label="Across the run (click a row)"
    )
    step = gr.Dropdown([], label="Step", elem_id="analysed-step")
    with gr.Row():
        group_prev = gr.Button("◀ previous groups", elem_id="analysed-groups-prev", scale=0)
        group_note = gr.Markdown(elem_id="analysed-groups-note")
        group_next = gr.Button("next groups ▶", elem_id="analysed-groups-next", scale=0)
    group_at = gr.State(0)
    groups = gr.Dataframe(interactive=False, elem_id="analysed-groups", label="Groups (click one)")
    answers = gr.Dataframe(
        interactive=False, elem_id="analysed-answers", label="Answers (click one)"
    )
    tokens = gr.HTML(tokens_html([], []), elem_id="analysed-tokens")
    with gr.Row():
        token_prev = gr.Button("◀ previous tokens", elem_id="analysed-tokens-prev", scale=0)
        token_next = gr.Button("next tokens ▶", elem_id="analysed-tokens-next", scale=0)
    body = gr.State(None)
    shown = gr.State(None)
    timer = gr.Timer(POLL_S)

    refresh.click(h.refresh, None, run)
    # each page load lists the runs anew (building the UI reads none: startup never waits on
    # a run root, and a run written since the server started is there after a reload)
    blocks = Context.root_block
    assert blocks is not None  # built inside the app's gr.Blocks
    blocks.load(h.refresh, None, run, show_progress="hidden")
    opened = [body, status, plot_reward, plot_select, step, download, shown, pair]
    run.change(h.open, run, opened)
    timer.tick(
        h.poll, [run, body], [body, status, plot_reward, plot_select, step], show_progress="hidden"
    )
    find.click(h.find, [run, order, contains, zero, pair], [results, note])
    contains.submit(h.find, [run, order, contains, zero, pair], [results, note])
    step.change(h.groups, [run, step], [groups, group_note, group_at])
    group_prev.click(
        lambda r, s, at: h.group_page(r, s, at, -1),
        [run, step, group_at],
        [groups, group_note, group_at],
    )
    group_next.click(
        lambda r, s, at: h.group_page(r, s, at, 1),
        [run, step, group_at],
        [groups, group_note, group_at],
    )
    token_prev.click(
        lambda r, b, sh: h.token_move(r, b, sh, -1), [run, body, shown], [tokens, download, shown]
    )
    token_next.click(
        lambda r, b, sh: h.token_move(r, b, sh, 1), [run, body, shown], [tokens, download, shown]
    )
    groups.select(h.pick_group, [run, step], answers)
    answers.select(h.pick_answer, [run, body], [tokens, download, shown])
    results.select(h.pick_answer, [run, body], [tokens, download, shown])
