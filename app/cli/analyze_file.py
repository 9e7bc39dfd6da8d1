"""`gmts analyze-file rollouts.jsonl`: analyze a trainer's dump of rollouts, line by line.

Each input line is one group: ``{"prompt": ..., "completions": [...], "rewards": [...]}`` or,
instead of ``rewards``, a ``reference`` scored with ``--reward-kind`` (or the line's own
``reward_kind``). A line may carry ``completion_ids`` (one list of token ids per completion, as
a trainer's dump has them): those ids are analysed as given, so the analysed tokens are the
trained tokens; without them each completion's text is tokenized on its own (no special
tokens) and appended to the prompt's ids, which can differ from the ids a model generated.
``--batch-size B`` analyzes B lines as one batch (selection scope ``batch`` ranks all their
tokens together, as the trainer did). Output: JSONL (one analysis per batch,
the API's body plus the input line numbers) or CSV (one row per token, with its input line).

Lines are read within a size budget, as the run readers read theirs: each line with a bounded
``readline``, so a line longer than ``--run-max-line-bytes`` (default: ``gmts analyze-run``'s,
256 MiB) is refused after reading that many bytes of it, never held whole.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from tqdm import tqdm

from app.cli._app import cli
from app.cli.common import (
    ModelOpt,
    analysis_request,
    cli_limits,
    fail,
    load_cli_model,
    services,
    with_options,
)
from app.services.export import write_csv
from app.services.line_budget import jsonl_lines
from app.services.validation import validated
from gmts_core.errors import GMTSError, InvalidInputError
from gmts_core.run_limits import CLI_LIMITS, RunLimits

# the request and response models (app.schemas.analyze_request, app.services.responses) import
# torch: imported where a batch is analysed, not for `gmts analyze-file --help`

logger = logging.getLogger(__name__)

Group = dict[str, Any]  # one group of an analyze request


class RolloutLine(BaseModel):
    """One line of a rollout file: a prompt, its completions and rewards or a reference."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    prompt: str = Field(min_length=1)
    completions: list[Annotated[str, Field(min_length=1)]] | None = Field(None, min_length=1)
    # the trained token ids of each completion (e.g. TRL's completion_ids): analysed as given
    completion_ids: list[Annotated[list[int], Field(min_length=1)]] | None = Field(
        None, min_length=1
    )
    rewards: list[float] | None = None
    reference: str | int | float | None = None
    reward_kind: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _answers_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "completions" not in data and "answers" in data:
            data = {**data, "completions": data["answers"]}
        return data

    @model_validator(mode="after")
    def _rewards_or_reference(self) -> RolloutLine:
        if self.completions is None and self.completion_ids is None:
            raise ValueError("needs completions or completion_ids")
        n = len(self.completion_ids or self.completions or [])
        if self.completions is not None and len(self.completions) != n:
            raise ValueError(f"{len(self.completions)} completions for {n} completion_ids")
        if self.rewards is None and self.reference is None:
            raise ValueError("needs rewards or a reference")
        if self.rewards is not None and len(self.rewards) != n:
            raise ValueError(f"{len(self.rewards)} rewards for {n} completions")
        return self

    def group(self, default_kind: str) -> dict[str, Any]:
        """The line as a group of an analyze request (``groups[i]`` of ``POST /v1/analyze``);
        with ``completion_ids`` those ids are the analysed (trained) tokens."""
        group: dict[str, Any] = {"prompt": self.prompt}
        if self.completion_ids is not None:  # the trained tokens; their text is decoded from them
            group["answer_ids"] = self.completion_ids
        elif self.completions is not None:
            group["answers"] = self.completions
        if self.rewards is not None:
            return {**group, "rewards": self.rewards}
        return {
            **group,
            "reward": {"kind": self.reward_kind or default_kind, "reference": self.reference},
        }


def read_rollouts(
    path: Path, default_kind: str, skip_invalid: bool, limits: RunLimits | None = None
) -> Iterator[tuple[int, Group]]:
    """(line number, group) for each non-empty line; bad lines raise or are skipped. Each
    line is read within ``limits.max_line_bytes`` (a longer one is refused, never skipped)."""
    for number, raw in jsonl_lines(path, limits or CLI_LIMITS):
        if not raw.strip():
            continue
        try:
            yield number, RolloutLine.model_validate_json(raw).group(default_kind)
        except ValidationError as exc:
            message = f"{path}:{number}: {_first_error(exc)}"
            if not skip_invalid:
                raise InvalidInputError(message) from None
            logger.warning("skipping %s", message)


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = ".".join(str(p) for p in e.get("loc", ())) or "line"
    return f"{where}: {str(e.get('msg', '')).removeprefix('Value error, ')}"


def _batches(items: Iterator[tuple[int, Group]], size: int) -> Iterator[list[tuple[int, Group]]]:
    batch: list[tuple[int, Group]] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _Writer:
    """Writes each batch's analysis as one JSONL line or as CSV token rows."""

    def __init__(self, out: TextIO, fmt: str) -> None:
        self.out, self.fmt, self.rows, self._header = out, fmt, 0, True

    def write(self, body: dict[str, Any], lines: list[int], batch_index: int) -> None:
        if self.fmt == "jsonl":
            record = {"batch": batch_index, "lines": lines, **body}
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
            self.rows += 1
            return
        extra = {"batch": batch_index}
        group_extra = [{"line": n} for n in lines]
        self.rows += write_csv(body, self.out, extra, self._header, group_extra)
        self._header = False


def _analyze_batch(
    batch: list[tuple[int, Group]],
    config: dict[str, Any],
    writer: _Writer,
    index: int,
    skip_invalid: bool,
) -> None:
    from app.schemas.analyze_request import AnalyzeRequest
    from app.services.responses import as_json

    lines = [n for n, _ in batch]
    try:
        req = validated(AnalyzeRequest, {**config, "groups": [g for _, g in batch]})
        body = as_json(services().analysis.run(req, cli_limits()))
    except InvalidInputError as exc:
        if not skip_invalid:
            raise InvalidInputError(f"lines {lines}: {exc}") from None
        logger.warning("skipping lines %s: %s", lines, exc)
        return
    writer.write(body, lines, index)


def _count_lines(path: Path, limits: RunLimits) -> int:
    """The non-empty lines, counted within the line budget (an over-long line is refused
    here, before any analysis)."""
    return sum(1 for _, raw in jsonl_lines(path, limits) if raw.strip())


@cli.command("analyze-file")
@with_options(analysis_request, "analysis")
def analyze_file_command(
    rollouts: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSONL file.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Output file (.jsonl or .csv).")
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="jsonl | csv (default: from --output).")
    ] = None,
    model: ModelOpt = "tiny-arith",
    batch_size: Annotated[int, typer.Option(min=1, help="Lines analyzed as one batch.")] = 1,
    reward_kind: Annotated[str, typer.Option(help="Rule for lines with a reference.")] = "numeric",
    analysis: dict[str, Any] | None = None,
    skip_invalid: Annotated[bool, typer.Option(help="Skip bad lines instead of failing.")] = False,
    run_max_line_bytes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Refuse a line longer than this many bytes (default: 256 MiB, as analyze-run).",
        ),
    ] = None,
) -> None:
    """Analyze every group of a rollout dump (one JSON object per line) with a progress bar."""
    output = output or rollouts.with_suffix(".gmts.jsonl")
    fmt = fmt or ("csv" if output.suffix.lower() == ".csv" else "jsonl")
    if fmt not in ("jsonl", "csv"):
        raise typer.BadParameter("--format must be jsonl or csv")
    from app.schemas.analyze_request import AnalyzeRequest

    try:
        config = analysis or {}
        # the knobs are checked once, up front, as part of a minimal request
        validated(AnalyzeRequest, {**config, "prompt": "-", "rewards": [0.0], "answers": ["-"]})
        load_cli_model(model)  # an unknown or broken model fails before any line is read
        limits = CLI_LIMITS
        if run_max_line_bytes is not None:
            limits = replace(CLI_LIMITS, max_line_bytes=run_max_line_bytes)
        total = _count_lines(rollouts, limits)
        with output.open("w", encoding="utf-8", newline="") as out:
            writer = _Writer(out, fmt)
            items = read_rollouts(rollouts, reward_kind, skip_invalid, limits)
            with tqdm(total=total, unit="line", desc="analyzing") as bar:
                for i, batch in enumerate(_batches(items, batch_size)):
                    _analyze_batch(batch, {**config, "model": model}, writer, i, skip_invalid)
                    bar.update(len(batch))
    except GMTSError as exc:
        raise fail(exc) from None
    typer.echo(f"wrote {writer.rows} {'rows' if fmt == 'csv' else 'lines'} to {output}", err=True)
