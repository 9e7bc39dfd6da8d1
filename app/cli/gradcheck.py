"""`gmts gradcheck`: how good is each selection score? Exact per-token gradients vs the scores."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from app.cli._app import cli
from app.cli.common import (
    cli_limits,
    echo_body,
    fail,
    group_request,
    progress_console,
    progress_lines,
    services,
    with_options,
)
from app.services.catalog import GRADCHECK_MAX_TOKENS
from app.services.validation import validated
from gmts_core.errors import GMTSError


@cli.command("gradcheck")
@with_options(group_request, "request")
def gradcheck_command(
    request: dict[str, Any],
    max_tokens: Annotated[
        int, typer.Option(help="Refuse more answer tokens than this (one backward each).")
    ] = GRADCHECK_MAX_TOKENS,
    precision: Annotated[str, typer.Option(help="float32 | float64")] = "float32",
    as_json: Annotated[
        bool, typer.Option("--json", help="The analyze JSON with true norms and `fidelity`.")
    ] = False,
) -> None:
    """Exact full-parameter gradient norm of each answer token, and how well each score ranks it."""
    # the request and response models import torch: only when the command runs, not for --help
    from app.schemas.gradcheck import GradcheckRequest
    from app.services.responses import as_json as json_body

    request = {**request, "max_tokens": max_tokens, "precision": precision}
    progress = progress_console()
    try:
        req = validated(GradcheckRequest, request)
        if progress.is_terminal:  # a spinner naming the stage, gone when done
            with progress.status("gradcheck") as status:
                result = services().gradcheck.run(
                    req, cli_limits(), lambda name, _done, _total: status.update(name)
                )
        else:  # one line per stage: a pipe or a log sees where it is
            tick = progress_lines(progress)
            result = services().gradcheck.run(
                req, cli_limits(), lambda name, done, total: tick(done + 1, total, name)
            )
        body = json_body(result)
    except GMTSError as exc:
        raise fail(exc) from None
    echo_body(body, as_json, render_fidelity)


def fmt(value: float | None, digits: int = 3) -> str:
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
            fmt(rho["batch"]),
            fmt(rho["within_answer_median"]),
            fmt(fid["true_grad_coverage"][m]),
            fmt(fid["true_grad_sq_coverage"][m]),
            fmt(fid["cosine_to_full"][m]),
            fmt(fid["norm_ratio_to_full"][m]),
        )
    return table


def render_fidelity(body: dict[str, Any], console: Console) -> None:
    fid = body["fidelity"]
    s = body["summary"]
    console.print(
        f"{fid['num_tokens']} answer tokens, {fid['num_parameters']:,} parameters, "
        f"k={s['k']} ({s['scope']}), {fid['precision']}, {fid['seconds']:.2f} s; "
        f"||full gradient|| = {fid['full_grad_norm']:.4g}"
    )
    console.print(fidelity_table(fid))
    head = fid["spearman_head"]
    console.print(
        f"head-only norm (gamma * ||h||) vs true norm: Spearman {fmt(head['batch'])}, "
        f"median in answer {fmt(head['within_answer_median'])}"
    )
    for note in fid["notes"]:
        console.print(f"[yellow]note:[/] {note}")
