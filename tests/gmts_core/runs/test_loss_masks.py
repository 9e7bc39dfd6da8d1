"""Loss masks are honoured for every registered run format that carries one: a token the trainer's
loss did not count (loss mask 0: a tool output, an environment message) is never selected,
ranked or counted in a budget, a coverage, a wasted share, a reason or a summary, and its
record says so (``trained`` False) with its text.

Registry-driven: every registered reader must name its fixture in tests/run_fixtures.py (a new
reader fails :func:`test_every_registered_format_has_a_fixture_that_opens` until it does), and
every format whose groups carry a mask is analysed by the property test (each such fixture must
mask some tokens: miles' has tool outputs with ``loss_mask`` 0, as its multi-turn rollout writes
them).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gmts_core.analysis.difference_reasons import all_differences
from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.methods.selection import METHODS, top_k_count
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.runs import READERS, detect_format, open_run
from gmts_core.runs.analysis import AnalysisConfig, analyze_step
from gmts_core.runs.token_samples import trained_mask
from tests.run_fixtures import FIXTURES

# every method that scores from an analysis's own numbers (no trainer-only inputs)
METHOD_NAMES = tuple(m for m in METHODS.names() if m not in ("kl_cov", "clip_cov"))


def test_every_registered_format_has_a_fixture_that_opens() -> None:
    assert set(READERS.names()) == set(FIXTURES), "a registered reader has no fixture"
    for name, path in FIXTURES.items():
        assert detect_format(path) == name
        assert open_run(path).steps


def masked_formats() -> list[tuple[str, Path]]:
    """Every registered format whose first step's groups carry a loss mask."""
    out = []
    for name, path in FIXTURES.items():
        step = open_run(path).step(open_run(path).steps[0])
        if any(trained_mask(g) is not None for g in step.groups):
            out.append((name, path))
    return out


@pytest.fixture(scope="module")
def demo_lm() -> LoadedModel:
    return load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu", dtype="float32")


def test_untrained_tokens_are_never_selected_nor_counted(demo_lm: LoadedModel) -> None:
    found = masked_formats()
    assert {"prime_rl", "nemo_rl", "miles", "slime"} <= {name for name, _ in found}
    for name, path in found:
        run = open_run(path)
        step = run.step(run.steps[0])
        masks = [m for g in step.groups for m in (trained_mask(g) or [])]
        assert any(not all(m) for m in masks), f"{name}: the fixture masks no token"
        for ratio, scope in ((0.2, "batch"), (0.5, "group"), (0.3, "answer")):
            config = AnalysisConfig(methods=METHOD_NAMES, ratio=ratio, scope=scope, beta=0.0)
            report, result = analyze_step(demo_lm, step, config)
            x = result.inputs
            assert x is not None and x.trained is not None
            trained = x.trained
            assert trained.tolist() == [bool(t) for m in masks for t in m]
            n_trained = int(trained.sum())
            for method, sel in result.selections.items():
                where = f"{name} {method} {scope}"
                assert not bool((sel.selected & ~trained).any()), where
                assert bool((sel.ranks[~trained] == 0).all()), where
                assert report.selected_count[method] == int(sel.selected.sum()), where
            # budgets over trained tokens only
            scope_ids = {
                "batch": torch.zeros_like(x.answer_index),
                "group": x.group_index,
                "answer": x.answer_index,
            }[scope][trained]
            k = sum(top_k_count(ratio, int(c)) for c in torch.bincount(scope_ids) if c > 0)
            assert result.summary["k"] == k
            assert result.summary["num_tokens"] == n_trained == report.num_tokens
            assert result.summary["num_untrained_tokens"] == x.num_tokens - n_trained
            proxy = x.grad_proxy[trained]
            for method, sel in result.selections.items():
                kept = sel.selected[trained]
                total = float(proxy.sum())
                if total > 0:
                    assert report.gradient_coverage[method] == pytest.approx(
                        float(proxy[kept].sum()) / total
                    )
                chosen = int(kept.sum())
                zero = int(((proxy == 0) & kept).sum())
                assert report.wasted_share[method] == pytest.approx(zero / chosen if chosen else 0)
            # each group's summary counts trained tokens only
            for g_index, group in enumerate(result.groups):
                in_group = (x.group_index == g_index) & trained
                assert group.summary["num_tokens"] == int(in_group.sum())
            # the records: greyed (trained False) with their text, never selected
            records = [t for g in result.groups for a in g.answers for t in a.tokens]
            assert [t.trained for t in records] == trained.tolist()
            assert all(t.text is not None for t in records if not t.trained)
            assert not any(any(t.selected.values()) for t in records if not t.trained)
            # why they differ: only about trained tokens
            for d in all_differences(result):
                assert d.both + d.only_a + d.only_b <= n_trained
            assert report.entropy_mean == pytest.approx(float(x.entropy[trained].mean()))
            assert not math.isnan(report.entropy_mean or math.nan)
