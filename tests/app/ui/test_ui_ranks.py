"""A token's rank lines read against their own method's count: for every registered method and
every scope, each "m: #r — selected (it keeps the top K)" line of every tooltip says selected
exactly when r <= K (``all`` keeps every token; the paper's rules keep counts of their own)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from app.services.responses import analysis_json
from app.ui import render
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.methods.selection import METHODS
from gmts_core.model.loading import load_model
from tests.app.api_helpers import TINY

LINE = re.compile(r"^  (\S+): #(\d+) — (selected|not selected) \(it keeps the top (\d+)\)$")


@pytest.fixture(scope="module")
def results(model_root: Path) -> dict[str, dict]:
    lm = load_model(model_root / TINY, name="tiny")
    groups = [
        GroupInput("Q: 1+1=?\nA:", answers=[" 2", " 3 or 4 it is", " 2 ok"], rewards=[1, 0, 1]),
        GroupInput("Q: 2+3=?\nA:", answers=[" 5", " 6 and 7", " five"], rewards=[1, 0, 0]),
    ]
    methods = tuple(METHODS.names())
    return {
        scope: analysis_json(
            analyze(lm, groups, AnalysisConfig(methods=methods, ratio=0.3, scope=scope))
        )
        for scope in ("batch", "group", "answer")
    }


@pytest.mark.parametrize("scope", ["batch", "group", "answer"])
def test_every_rank_line_agrees_with_its_methods_count(results: dict, scope: str) -> None:
    result = results[scope]
    checked = set()
    for method in METHODS.names():
        for gi in range(len(result["groups"])):
            page = render.render_result(result, (method, "gmts"), group_index=gi)
            for tip in re.findall(r'data-tip="([^"]*)"', page):
                for line in html.unescape(tip).split("\n"):
                    if not line.startswith("  ") or ": #" not in line:
                        continue
                    m = LINE.match(line)
                    assert m, line
                    name, rank, verdict, kept = m.groups()
                    assert (int(rank) <= int(kept)) == (verdict == "selected"), (scope, line)
                    checked.add(name)
    assert checked == set(METHODS.names())
