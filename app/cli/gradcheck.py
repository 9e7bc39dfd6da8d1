"""`gmts gradcheck`: how good is each selection score? Exact per-token gradients vs the scores."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from app.cli._app import cli
from app.cli.common import fail, group_from_flags, load_cli_model
from gmts_core.analysis import AnalysisConfig
from gmts_core.errors import GMTSError
from gmts_core.gradcheck import DEFAULT_MAX_TOKENS, GradcheckResult, gradcheck


@cli.command("gradcheck")
def gradcheck_command(
    prompt: Annotated[str, typer.Option(help="The prompt text.")],
    model: Annotated[str, typer.Option(help="Alias, local folder or hub id.")] = "tiny-arith",
    answer: Annotated[
        list[str] | None, typer.Option(help="A given answer (repeat); else sample.")
    ] = None,
    n: Annotated[int, typer.Option("-n", "--num-samples", help="Answers to sample.")] = 8,
    rewards: Annotated[str | None, typer.Option(help="Explicit rewards, e.g. 1,0,0,1.")] = None,
    reward_kind: Annotated[str, typer.Option(help="numeric | exact | regex | math")] = "numeric",
    reference: Annotated[str | None, typer.Option(help="Reference answer for the rule.")] = None,
    ratio: Annotated[float, typer.Option(help="Share of tokens each method selects.")] = 0.2,
    scope: Annotated[str, typer.Option(help="batch | answer")] = "batch",
    advantage: Annotated[str, typer.Option(help="grpo | dr_grpo | rloo")] = "grpo",
    aggregation: Annotated[str, typer.Option(help="Loss aggregation.")] = "token_mean",
    temperature: Annotated[float, typer.Option(help="Sampling and statistics temperature.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Longest sampled answer.")] = 64,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    top_alternatives: Annotated[int, typer.Option(help="Alternatives per token.")] = 5,
    chat_template: Annotated[
        bool, typer.Option(help="Wrap the prompt in the chat template.")
    ] = False,
    max_tokens: Annotated[
        int, typer.Option(help="Refuse more answer tokens than this (one backward each).")
    ] = DEFAULT_MAX_TOKENS,
    precision: Annotated[str, typer.Option(help="float32 | float64")] = "float32",
    as_json: Annotated[
        bool, typer.Option("--json", help="The analyze JSON with true norms and `fidelity`.")
    ] = False,
) -> None:
    """Exact full-parameter gradient norm of each answer token, and how well each score ranks it."""
    try:
        lm = load_cli_model(model)
        group = group_from_flags(
            prompt,
            answer,
            n,
            temperature,
            top_p,
            max_new_tokens,
            seed,
            rewards,
            reward_kind,
            reference,
        )
        config = AnalysisConfig(
            temperature=temperature,
            advantage=advantage,
            loss_aggregation=aggregation,
            ratio=ratio,
            scope=scope,
            top_alternatives=top_alternatives,
            seed=seed,
            chat_template=chat_template,
        )
        result = gradcheck(lm, [group], config, max_tokens=max_tokens, precision=precision)
    except GMTSError as exc:
        raise fail(exc) from None
    if as_json:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        render_fidelity(result, Console())


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def fidelity_table(fid: dict[str, Any]) -> Table:
    """One row per method: rank correlation with the true norms and what its selection keeps."""
    table = Table(
        title="How good is the proxy? Scores vs exact per-token gradient norms",
        caption="Spearman: rank correlation of the score with the true norm (all tokens; median "
        "within answers). kept: share of the sum of true norms (or squared norms) in the "
        "selection. cosine: between the selected tokens' gradient and the full loss gradient.",
    )
    columns = (
        "method",
        "Spearman\nall",
        "Spearman\nin answer",
        "true norm\nkept",
        "squared\nkept",
        "cosine\nto full",
        "norm\nratio",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
    for m, rho in fid["spearman"].items():
        table.add_row(
            m,
            _fmt(rho["batch"]),
            _fmt(rho["within_answer_median"]),
            _fmt(fid["true_grad_coverage"][m]),
            _fmt(fid["true_grad_sq_coverage"][m]),
            _fmt(fid["cosine_to_full"][m]),
            _fmt(fid["norm_ratio_to_full"][m]),
        )
    return table


def render_fidelity(result: GradcheckResult, console: Console) -> None:
    fid = result.fidelity
    s = result.analysis.summary
    console.print(
        f"{fid['num_tokens']} answer tokens, {fid['num_parameters']:,} parameters, "
        f"k={s['k']} ({s['scope']}), {result.precision}, {fid['seconds']:.2f} s; "
        f"||full gradient|| = {fid['full_grad_norm']:.4g}"
    )
    console.print(fidelity_table(fid))
    head = fid["spearman_head"]
    console.print(
        f"head-only norm (gamma * ||h||) vs true norm: Spearman {_fmt(head['batch'])}, "
        f"median in answer {_fmt(head['within_answer_median'])}"
    )
    for note in fid["notes"]:
        console.print(f"[yellow]note:[/] {note}")
