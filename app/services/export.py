"""Analysis downloads for every front end: CSV (one row per answer token) or JSON (the API's body).

Works on the JSON body of ``POST /v1/analyze`` (single or batch form), so the UI can
export what it got from a remote server as well as a local result. In CSV, a token text that
starts with ``= + - @`` (or a tab/CR) gets a leading ``'`` so spreadsheets do not run it as a
formula (OWASP CSV injection); the JSON export is exact.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from typing import Any, Literal, TextIO

TOKEN_FIELDS = (
    "position",
    "id",
    "text",
    "logprob",
    "prob",
    "entropy",
    "grad_norm",
    "grad_proxy",
)
# the effective coefficient (gmts_core.methods.coefficient)
COEF_FIELDS = ("ratio", "clipped", "coef")
ANSWER_FIELDS = ("group_index", "answer_index", "reward", "advantage", "weight", "finished")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def body_groups(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The groups of a result body in one shape: [{index, prompt, answers}] for both forms."""
    if "groups" in body and body["groups"] is not None:
        return list(body["groups"])
    return [{"index": 0, "prompt": body.get("prompt", ""), "answers": body.get("answers", [])}]


def _methods(body: dict[str, Any]) -> list[str]:
    methods = body.get("settings", {}).get("methods")
    if methods:
        return list(methods)
    for g in body_groups(body):
        for a in g["answers"]:
            for t in a["tokens"]:
                return list(t["scores"])
    return []


def csv_columns(body: dict[str, Any], extra: tuple[str, ...] = ()) -> list[str]:
    """Column names: extra, answer fields, token fields, then score/rank/selected per method."""
    per_method = [f"{kind}_{m}" for m in _methods(body) for kind in ("score", "rank", "selected")]
    head = (*extra, *ANSWER_FIELDS, *TOKEN_FIELDS)
    return [*head, *COEF_FIELDS, "grad_head", *per_method, "alternatives"]


def token_rows(
    body: dict[str, Any],
    extra: dict[str, Any] | None = None,
    group_extra: Sequence[dict[str, Any]] | None = None,
) -> Iterator[dict[str, Any]]:
    """One flat dict per answer token, in (group, answer, position) order.

    ``extra`` is added to every row, ``group_extra[i]`` to the rows of group i.
    """
    methods = _methods(body)
    for g in body_groups(body):
        per_group = group_extra[g["index"]] if group_extra is not None else {}
        for a in g["answers"]:
            base = {
                **(extra or {}),
                **per_group,
                "group_index": g["index"],
                "answer_index": a["index"],
                "reward": a["reward"],
                "advantage": a["advantage"],
                "weight": a["weight"],
                "finished": a["finished"],
            }
            for t in a["tokens"]:
                row = {**base, **{f: t[f] for f in TOKEN_FIELDS}, "grad_head": t.get("grad_head")}
                row.update({f: t.get(f) for f in COEF_FIELDS})
                for m in methods:
                    row[f"score_{m}"] = t["scores"].get(m)
                    row[f"rank_{m}"] = t["ranks"].get(m)
                    row[f"selected_{m}"] = t["selected"].get(m)
                alts = [[x["text"], x["prob"]] for x in t["alternatives"]]
                row["alternatives"] = json.dumps(alts, ensure_ascii=False)
                yield row


def _safe_cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def write_csv(
    body: dict[str, Any],
    out: TextIO,
    extra: dict[str, Any] | None = None,
    header: bool = True,
    group_extra: Sequence[dict[str, Any]] | None = None,
) -> int:
    """Write the token rows of ``body`` as CSV to ``out``; returns the number of rows."""
    names = (*(extra or {}), *(group_extra[0] if group_extra else {}))
    writer = csv.DictWriter(out, fieldnames=csv_columns(body, names))
    if header:
        writer.writeheader()
    n = 0
    for row in token_rows(body, extra, group_extra):
        writer.writerow({k: _safe_cell(v) for k, v in row.items()})
        n += 1
    return n


def to_csv(body: dict[str, Any]) -> str:
    """The whole analysis as CSV text (one row per answer token)."""
    buf = io.StringIO()
    write_csv(body, buf)
    return buf.getvalue()


def to_json(body: dict[str, Any]) -> str:
    """The whole analysis as JSON text (exactly the API's body)."""
    return json.dumps(body, ensure_ascii=False, indent=1)


ExportFormat = Literal["csv", "json"]
MEDIA_TYPES: dict[str, str] = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def export_text(body: dict[str, Any], fmt: ExportFormat) -> str:
    """The analyze body ``body`` as CSV text or as JSON text (exactly the body)."""
    return to_csv(body) if fmt == "csv" else to_json(body)
