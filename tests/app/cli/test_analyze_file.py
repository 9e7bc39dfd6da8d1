"""`gmts analyze-file`: rollout dumps to JSONL or CSV, per line or in batches."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import app.cli.analyze_file  # noqa: F401  (registers the command)
from app.cli._app import cli
from tests.app.api_helpers import TINY

LINES = [
    {"prompt": "Q: 1+2=?\nA:", "completions": [" 3", " 4"], "rewards": [1, 0]},
    {"prompt": "Q: 4+4=?\nA:", "completions": [" 8", " 7", " 8"], "reference": "8"},
    {"prompt": "Q: 5+2=?\nA:", "answers": [" 7"], "rewards": [1]},
]


@pytest.fixture
def rollouts(tmp_path: Path) -> Path:
    path = tmp_path / "rollouts.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in LINES) + "\n\n")
    return path


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(cli, ["analyze-file", *args])


def test_jsonl_output_one_analysis_per_line(rollouts: Path, model_root: Path) -> None:
    out = rollouts.with_name("out.jsonl")
    r = _run(str(rollouts), "--model", str(model_root / TINY), "-o", str(out))
    assert r.exit_code == 0, r.output
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [rec["lines"] for rec in records] == [[1], [2], [3]]
    assert [len(rec["answers"]) for rec in records] == [2, 3, 1]
    assert [a["reward"] for a in records[1]["answers"]] == [1.0, 0.0, 1.0]  # numeric rule
    assert records[1]["answers"][0]["reward_detail"]["verdict"] == "correct"


def test_batches_rank_tokens_across_lines(rollouts: Path, model_root: Path) -> None:
    out = rollouts.with_name("out.jsonl")
    args = ["--model", str(model_root / TINY), "-o", str(out), "--batch-size", "2"]
    r = _run(str(rollouts), *args, "--ratio", "0.5", "--scope", "batch")
    assert r.exit_code == 0, r.output
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [rec["lines"] for rec in records] == [[1, 2], [3]]
    first = records[0]
    assert len(first["groups"]) == 2 and first["summary"]["scope"] == "batch"
    n = first["summary"]["num_tokens"]
    assert first["summary"]["selected_count"]["gmts"] == -(-n // 2)


def test_csv_output_rows_per_token_with_line(rollouts: Path, model_root: Path) -> None:
    out = rollouts.with_name("out.csv")
    r = _run(str(rollouts), "--model", str(model_root / TINY), "-o", str(out))
    assert r.exit_code == 0, r.output
    with out.open() as f:
        rows = list(csv.DictReader(f))
    jsonl = rollouts.with_name("ref.jsonl")
    _run(str(rollouts), "--model", str(model_root / TINY), "-o", str(jsonl))
    total = sum(json.loads(x)["summary"]["num_tokens"] for x in jsonl.read_text().splitlines())
    assert len(rows) == total
    assert {r["line"] for r in rows} == {"1", "2", "3"}


def test_bad_line_fails_with_its_number_or_is_skipped(tmp_path: Path, model_root: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps(LINES[0]), '{"prompt": "x"}', json.dumps(LINES[2])]
    path.write_text("\n".join(lines))
    out = tmp_path / "out.jsonl"
    r = _run(str(path), "--model", str(model_root / TINY), "-o", str(out))
    assert r.exit_code == 2
    assert "bad.jsonl:2" in r.output
    r = _run(str(path), "--model", str(model_root / TINY), "-o", str(out), "--skip-invalid")
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["lines"] for x in out.read_text().splitlines()] == [[1], [3]]


def test_completion_ids_are_analysed_as_the_trained_tokens(
    tmp_path: Path, model_root: Path
) -> None:
    """With completion_ids the analysed tokens are exactly those ids (here one id per
    character, which re-tokenizing the text would merge); without them the text is tokenized,
    and every answer says which."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_root / TINY))
    text = " 17 + 25 = 42"
    per_char = [tok.convert_tokens_to_ids(tok.tokenize(c))[0] for c in text]
    merged = list(tok(text, add_special_tokens=False)["input_ids"])
    assert per_char != merged, "the test needs ids that the text does not re-tokenize to"
    line = {
        "prompt": "Q: 17+25=?\nA:",
        "completion_ids": [per_char, merged],
        "completions": [text, text],
        "reference": "42",
    }
    text_line = {"prompt": "Q: 17+25=?\nA:", "completions": [text], "rewards": [1]}
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(text_line) + "\n")
    out = tmp_path / "out.jsonl"
    r = _run(str(path), "--model", str(model_root / TINY), "-o", str(out))
    assert r.exit_code == 0, r.output
    first, second = [json.loads(x) for x in out.read_text().splitlines()]
    got = [[t["id"] for t in a["tokens"]] for a in first["answers"]]
    assert got == [per_char, merged]
    assert [a["tokenization"] for a in first["answers"]] == ["ids", "ids"]
    # the reward rule reads the decoded ids
    assert first["answers"][0]["text"] == tok.decode(per_char, skip_special_tokens=True)
    assert [t["id"] for t in second["answers"][0]["tokens"]] == merged
    assert second["answers"][0]["tokenization"] == "text"


def test_completion_ids_outside_the_vocabulary_are_refused(
    tmp_path: Path, model_root: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "Q", "completion_ids": [[1, 10**9]], "rewards": [1]}))
    r = _run(str(path), "--model", str(model_root / TINY), "-o", str(tmp_path / "o.jsonl"))
    assert r.exit_code != 0
    assert "outside the vocabulary" in r.output


def test_a_line_over_the_line_limit_is_refused_naming_the_limit_and_its_option(
    tmp_path: Path, model_root: Path
) -> None:
    """A line longer than --run-max-line-bytes is refused (read with the run readers' bounded
    readline) before anything is analysed or written; a larger limit reads it."""
    path = tmp_path / "long.jsonl"
    long_line = {"prompt": "Q: 47+38=?\nA:", "completions": [" 85" * 900, " 75"], "rewards": [1, 0]}
    path.write_text(json.dumps(LINES[0]) + "\n" + json.dumps(long_line) + "\n")
    out = tmp_path / "out.jsonl"
    args = [str(path), "--model", str(model_root / TINY), "-o", str(out)]
    r = _run(*args, "--run-max-line-bytes", "2000")
    assert r.exit_code == 2, r.output
    assert "long.jsonl:2: the line is longer than 2,000 bytes" in r.output
    assert "max_line_bytes = 2,000 (raise it with --run-max-line-bytes)" in r.output
    assert not out.exists()  # refused while counting the lines, before any analysis
    r = _run(*args, "--run-max-line-bytes", "2000", "--skip-invalid")
    assert r.exit_code == 2 and "--run-max-line-bytes" in r.output  # a limit, never skipped
    r = _run(*args, "--run-max-line-bytes", "4000")
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["lines"] for x in out.read_text().splitlines()] == [[1], [2]]
