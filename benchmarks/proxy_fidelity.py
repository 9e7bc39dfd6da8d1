"""How good is each selection score as a proxy of the true per-token gradient norm?

Run: ``.venv/bin/python benchmarks/proxy_fidelity.py [--prompts 12 --samples 8 --json]``

For ``--prompts`` held-out problems of the demo task (seeded), it samples a group of answers
from the bundled ``tiny-arith`` model at temperature 1, rewards them with the ``numeric`` rule,
and runs :func:`gmts_core.experiments.gradcheck.gradcheck` (exact full-parameter per-token
gradients, 20%
batch selection). Per method it reports, averaged over the groups that carry a learning signal
(groups whose rewards are all equal have no gradient and are counted, not averaged): the
Spearman correlation of the score with the true norm (over the group's tokens, and the median
within answers), the cosine between the selected tokens' gradient and the full-loss gradient,
and the share of the true gradient mass (and squared mass) the selection keeps. With
``--batch`` the same answers are also checked together as one training batch (selection over the
whole batch, as trainers do; this is where zero-signal groups waste a score's budget).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from typing import Any

import torch

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, RewardSpec
from gmts_core.demo import DEMO_ALIAS, DEMO_MODEL_DIR
from gmts_core.experiments.gradcheck import GradcheckResult, gradcheck
from gmts_core.methods.selection import list_methods
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.sampling.answers import SamplingConfig
from gmts_core.tasks.arith import REWARD_RULE, generate_problems

# every registered method: the core ones first, then the literature's
# (gmts_core/methods/other_papers.py)
METHODS = tuple(list_methods())
METRICS = (
    "spearman_batch",
    "spearman_within_answer_median",
    "cosine_to_full",
    "true_grad_coverage",
    "true_grad_sq_coverage",
)


def groups_for(args: argparse.Namespace) -> list[GroupInput]:
    problems = generate_problems(args.prompts, seed=args.seed, split="heldout")
    return [
        GroupInput(
            p.prompt,
            sampling=SamplingConfig(
                num_samples=args.samples,
                temperature=args.temperature,
                max_new_tokens=args.max_new_tokens,
                seed=args.seed + i,
            ),
            reward=RewardSpec(REWARD_RULE, p.reference),
        )
        for i, p in enumerate(problems)
    ]


def method_metrics(fid: dict[str, Any], m: str) -> dict[str, float | None]:
    rho = fid["spearman"][m]
    return {
        "spearman_batch": rho["batch"],
        "spearman_within_answer_median": rho["within_answer_median"],
        "cosine_to_full": fid["cosine_to_full"][m],
        "true_grad_coverage": fid["true_grad_coverage"][m],
        "true_grad_sq_coverage": fid["true_grad_sq_coverage"][m],
    }


def mean_over(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Mean of each metric over the rows where it is defined."""
    out: dict[str, float | None] = {}
    for key in METRICS:
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = statistics.fmean(values) if values else None  # type: ignore[arg-type]
    return out


def per_group(
    lm: LoadedModel, groups: list[GroupInput], config: AnalysisConfig
) -> tuple[dict[str, Any], list[GradcheckResult]]:
    rows: dict[str, list[dict[str, float | None]]] = {m: [] for m in METHODS}
    zero_signal, tokens, seconds = 0, 0, 0.0
    results = []
    for i, g in enumerate(groups):
        result = gradcheck(lm, [g], config, max_tokens=4096)
        results.append(result)
        fid = result.fidelity
        tokens, seconds = tokens + fid["num_tokens"], seconds + fid["seconds"]
        if fid["full_grad_norm"] == 0.0:
            zero_signal += 1
            logging.info("group %d (%s): zero signal", i, g.prompt.splitlines()[0])
            continue
        for m in METHODS:
            rows[m].append(method_metrics(fid, m))
        logging.info("group %d: gmts cosine %.3f", i, fid["cosine_to_full"]["gmts"])
    summary = {
        "groups": len(groups),
        "groups_with_signal": len(groups) - zero_signal,
        "tokens": tokens,
        "exact_gradient_seconds": seconds,
        "mean_over_groups_with_signal": {m: mean_over(rows[m]) for m in METHODS},
    }
    return summary, results


def as_batch(lm: LoadedModel, checked: list[GradcheckResult], config: AnalysisConfig) -> dict:
    """The same answers (their exact token ids) and rewards, selected as one batch."""
    groups = [
        GroupInput(
            g.prompt,
            # the sampled token ids themselves: the decoded text would re-tokenize "<eos>" as text
            answer_ids=[[t.id for t in a.tokens] for a in g.answers],
            rewards=[a.reward for a in g.answers],
        )
        for r in checked
        for g in r.analysis.groups
    ]
    result = gradcheck(lm, groups, config, max_tokens=100_000)
    fid = result.fidelity
    return {
        "tokens": fid["num_tokens"],
        "wasted_share": result.analysis.summary["wasted_share"],
        **{m: method_metrics(fid, m) for m in METHODS},
    }


def print_report(report: dict[str, Any]) -> None:
    s = report["per_group"]
    print(
        f"{report['model']}: {s['groups']} held-out prompts x {report['samples']} answers, "
        f"{s['groups_with_signal']} with a learning signal, {s['tokens']} tokens, "
        f"ratio {report['ratio']}, exact gradients {s['exact_gradient_seconds']:.0f} s"
    )
    print("mean over groups with signal")
    print_rows(s["mean_over_groups_with_signal"])
    if "batch" in report:
        print(f"all groups as one batch ({report['batch']['tokens']} tokens)")
        print_rows({m: report["batch"][m] for m in METHODS})


def print_rows(rows: dict[str, dict[str, float | None]]) -> None:
    labels = ("Spearman all", "Spearman in-ans", "cosine", "mass kept", "mass^2 kept")
    print(f"{'method':<14}" + "".join(f"{label:>16}" for label in labels))
    for m, row in rows.items():
        cells = "".join(f"{'n/a' if row[k] is None else f'{row[k]:.4f}':>16}" for k in METRICS)
        print(f"{m:<14}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--ratio", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", action="store_true", help="also check all groups as one batch")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    torch.set_num_threads(args.threads)
    if not (DEMO_MODEL_DIR / "config.json").is_file():
        raise SystemExit(f"the demo model is missing ({DEMO_MODEL_DIR}); train it first")
    lm = load_model(DEMO_MODEL_DIR, name=DEMO_ALIAS, device="cpu", dtype="float32")
    config = AnalysisConfig(temperature=args.temperature, ratio=args.ratio, methods=METHODS)
    groups = groups_for(args)
    report: dict[str, Any] = {
        "model": DEMO_ALIAS,
        "samples": args.samples,
        "ratio": args.ratio,
        "seed": args.seed,
    }
    report["per_group"], checked = per_group(lm, groups, config)
    if args.batch:
        report["batch"] = as_batch(lm, checked, config)
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)


if __name__ == "__main__":
    main()
