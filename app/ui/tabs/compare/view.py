"""The Compare tab: selection methods compared by training, run here or loaded from a file.

A run goes through the backend to the compare service (the local backend only: it holds a job
slot for the whole run and the server's per-step limits apply, so the UI keeps its sizes small);
a finished run of ``gmts compare --out DIR`` is loaded from ``DIR/compare.json``. Either way the
tab shows what ``compare.html`` shows, built by the same functions
(:mod:`app.reports.compare_report`): held-out
accuracy and training reward per method (mean ± std band over seeds), the wasted share of each
method's selection per step, and the final table.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.palette import method_color
from app.reports.compare_report import TABLE_CSS, compare_figures, intervals_note, table_html
from app.services.compare import NOISE_KNOBS, CompareResult, compare_config, write_outputs
from gmts_core.compare_config import CompareConfig
from gmts_core.config import CLASS_RECIPE

Json = dict[str, Any]
FIGURES = ("accuracy", "wasted_share", "reward", "loss")  # two per row: accuracy beside waste
FIGURE_LABELS = {
    "accuracy": "Held-out accuracy",
    "reward": "Training reward",
    "wasted_share": "Wasted share",
    "loss": "Loss",
}


# The tab's preset: entropy vs gmts from 2 paired seeds (same start, same batches, same held-out
# sampling seeds per seed), 10 steps of the Train tab's classroom recipe (32 prompts x G = 8,
# lr 1.5e-4 with warm-up, one update a batch: a recipe that learns, so no regression comes from
# the recipe itself), held-out accuracy on 200 problems; the table's t intervals over seeds
# and problems, its conclusion and its power advice say how far 2 seeds can separate the methods
# and how many would. The form shows these knobs of the compare (RUN_KNOBS), of its noise
# (NOISE_KNOBS: training-seed offset, evaluation seed, answers per problem, evaluation
# temperature) and of its GRPO steps (RL_KNOBS).
UI_COMPARE = CompareConfig(
    methods=("entropy", "gmts"),
    steps=10,
    seeds=2,
    eval_every=5,
    eval_problems=200,
    rl=CLASS_RECIPE,
)
RUN_KNOBS = ("ratio", "steps", "seeds", "eval_every", "eval_problems")
RL_KNOBS = ("group_size", "prompts_per_step", "max_new_tokens", "learning_rate")
MAX_TAB_SEEDS = 8  # the seeds slider's end: more runs than that belong to `gmts compare`


def form_default(name: str) -> Any:
    """The preset's value of the form knob ``name``."""
    if name in RUN_KNOBS or name in NOISE_KNOBS:
        return getattr(UI_COMPARE, name)
    return getattr(UI_COMPARE.rl, name)


def form_config(methods: Sequence[str], **knobs: Any) -> CompareConfig:
    """The run's config: the form's ``knobs`` (any of RUN_KNOBS, NOISE_KNOBS and RL_KNOBS; the
    preset's where left out) over the RL defaults, validated."""
    run = {k: knobs.get(k, form_default(k)) for k in RUN_KNOBS}
    noise = {k: knobs.get(k, form_default(k)) for k in NOISE_KNOBS}
    rl = {k: type(form_default(k))(knobs[k]) for k in RL_KNOBS if k in knobs}  # sliders: floats
    return compare_config(tuple(methods or ()), **run, base=UI_COMPARE.rl, noise=noise, **rl)


def more_seeds_note(result: CompareResult) -> str:
    """A line when the power advice asks for more seeds than this tab runs."""
    asked = [
        row["power"]["seeds_needed"]
        for row in result.table()
        if row.get("power") and row["power"]["seeds_needed"]
    ]
    if not asked or max(asked) <= MAX_TAB_SEEDS:
        return ""
    c = result.config
    return (
        f"\n\nThe power advice asks for up to {max(asked)} seeds, more than this tab runs (at "
        f"most {MAX_TAB_SEEDS}): run `gmts compare --methods {','.join(c.methods)} --seeds "
        f"{max(asked)} --seed-offset {c.seed_offset + c.seeds} --out DIR` and load "
        "`DIR/compare.json` here."
    )


# --- the view ---------------------------------------------------------------------------------


def summary_markdown(result: CompareResult) -> str:
    """The conclusion sentences (one per method against the reference), then the settings."""
    c = result.config
    sentences = "".join(f"- **{s}**\n" for s in result.conclusions())
    return (
        sentences
        + f"\n{intervals_note(result)}.{more_seeds_note(result)}\n\n"
        + (
            f"**{result.model}** · methods {', '.join(c.methods)} · ratio {c.ratio:g} · "
            f"{c.steps} steps × {c.seeds} seed(s) · G = {c.rl.group_size}, "
            f"{c.rl.prompts_per_step} prompts per step · task mix {c.task_mix} · "
            f"held-out problems {c.eval_problems} × {c.eval_samples} answer(s) at T = "
            f"{c.eval_temperature:g} · training seeds {c.seed_offset}–"
            f"{c.seed_offset + c.seeds - 1} · evaluation seed {c.eval_seed} · "
            f"start accuracy **{result.start_accuracy:.3f}** · wall time {result.seconds:.0f} s"
        )
    )


def compare_view(result: CompareResult) -> list[Any]:
    """Summary, final table and the four figures, in ``FIGURES`` order."""
    figs = compare_figures(result, method_color)
    table = f"<style>{TABLE_CSS}</style><div class='compare-final'>{table_html(result)}</div>"
    return [summary_markdown(result), table, *(figs[k] for k in FIGURES)]


def write_downloads(result: CompareResult) -> tuple[Path, Path]:
    """compare.json and compare.html of ``result`` in a fresh temporary folder."""
    json_path, html_path, _table = write_outputs(
        result, Path(tempfile.mkdtemp(prefix="gmts-compare-"))
    )
    return json_path, html_path
