"""`gmts analyze`: analyze one group from the command line, as a coloured view or as JSON."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from app.cli._app import cli
from app.cli.common import cli_limits, echo_body, fail, group_request, services, with_options
from app.services.validation import validated
from gmts_core.errors import GMTSError

# entropy-only: underline; GMTS-only: bold on blue; both: bold reverse (readable without colour)
_STYLES = {"both": "bold reverse", "a": "underline yellow", "b": "bold white on blue"}


@cli.command("analyze")
@with_options(group_request, "request")
def analyze_command(
    request: dict[str, Any],
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON body.")] = False,
) -> None:
    """Entropy, gradient magnitude and GMTS rank of every answer token of one group."""
    # the request and response models import torch: only when the command runs, not for --help
    from app.schemas.analyze_request import AnalyzeRequest
    from app.services.responses import as_json as json_body

    try:
        req = validated(AnalyzeRequest, request)
        body = json_body(services().analysis.run(req, cli_limits()))
    except GMTSError as exc:
        raise fail(exc) from None
    echo_body(body, as_json, render_terminal)


def _answers(body: dict[str, Any]) -> list[dict[str, Any]]:
    groups = body.get("groups") or [body]
    return [a for g in groups for a in g["answers"]]


def render_terminal(
    body: dict[str, Any], console: Console, a: str = "entropy", b: str = "gmts"
) -> None:
    """Each answer with tokens marked: selected by both methods, only ``a`` or only ``b``."""
    console.print(
        Text.assemble(
            "legend: ",
            ("both", _STYLES["both"]),
            "  ",
            (f"only {a}", _STYLES["a"]),
            "  ",
            (f"only {b}", _STYLES["b"]),
        )
    )
    for ans in _answers(body):
        line = Text(f"#{ans['index']} r={ans['reward']:g} A={ans['advantage']:+.3f}  ")
        for tok in ans["tokens"]:
            sa, sb = tok["selected"].get(a, False), tok["selected"].get(b, False)
            style = (
                _STYLES["both"] if sa and sb else _STYLES["a"] if sa else _STYLES["b"] if sb else ""
            )
            line.append(tok["text"].replace("\n", "⏎"), style=style)
        console.print(line)
    s = body["summary"]
    if s["zero_signal"]:
        console.print(
            "[bold red]All rewards are equal: every advantage is 0 and this group "
            "carries no learning signal.[/]"
        )
    table = Table(title=f"summary: {s['num_tokens']} tokens, k={s['k']} ({s['scope']})")
    for col in ("method", "selected", "gradient coverage", "wasted share"):
        table.add_column(col)
    for m, cov in s["gradient_coverage"].items():
        table.add_row(m, str(s["selected_count"][m]), f"{cov:.3f}", f"{s['wasted_share'][m]:.3f}")
    console.print(table)
    rho = s["spearman_entropy_grad"]
    console.print(
        f"Spearman(entropy, grad_proxy): batch={rho['batch']}, "
        f"within-answer median={rho['within_answer_median']}"
    )
