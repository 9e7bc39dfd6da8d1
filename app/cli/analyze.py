"""`gmts analyze`: analyze one group from the command line, as a coloured view or as JSON."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from app.cli._app import cli
from app.cli.common import fail, group_from_flags, load_cli_model
from gmts_core.analysis import AnalysisConfig, analyze
from gmts_core.errors import GMTSError
from gmts_core.records import AnalysisResult

# entropy-only: underline; GMTS-only: bold on blue; both: bold reverse (readable without colour)
_STYLES = {"both": "bold reverse", "a": "underline yellow", "b": "bold white on blue"}


@cli.command("analyze")
def analyze_command(
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
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON body.")] = False,
) -> None:
    """Entropy, gradient magnitude and GMTS rank of every answer token of one group."""
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
        result = analyze(lm, [group], config)
    except GMTSError as exc:
        raise fail(exc) from None
    if as_json:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        render_terminal(result, Console())


def render_terminal(
    result: AnalysisResult, console: Console, a: str = "entropy", b: str = "gmts"
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
    for _group, ans in result.iter_answers():
        line = Text(f"#{ans.index} r={ans.reward:g} A={ans.advantage:+.3f}  ")
        for tok in ans.tokens:
            sa, sb = tok.selected.get(a, False), tok.selected.get(b, False)
            style = (
                _STYLES["both"] if sa and sb else _STYLES["a"] if sa else _STYLES["b"] if sb else ""
            )
            line.append(tok.text.replace("\n", "⏎"), style=style)
        console.print(line)
    s = result.summary
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
