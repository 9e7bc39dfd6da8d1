"""Measure smollm2-135m on the natural-language arithmetic task (docs/demo-model.md): accuracy
at temperature 1 (G answers per problem) and greedy, the share of zero-signal groups at G, per
level, with the ``final_number`` reward, the prompts in the model's chat template.

    python scripts/measure_smollm2.py --problems 200 --group-size 8 --max-new-tokens 96

Progress (16 problems at a time) on stderr; one JSON object on stdout, with the machine's load
average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import torch

from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.model.packaged import SMOLLM2
from gmts_core.sampling.answers import SamplingConfig, sample_groups
from gmts_core.stats.tokenization import encode_prompt
from gmts_core.tasks.word_arith import WordProblem, generate_word_problems


def _rewards(
    lm: LoadedModel,
    problems: list[WordProblem],
    temperature: float,
    group: int,
    args: Any,
    seed: int,
) -> list[list[float]]:
    encoded = [encode_prompt(lm.tokenizer, p.prompt, chat_template=True) for p in problems]
    configs = [
        SamplingConfig(group, temperature, 1.0, 0, args.max_new_tokens, seed + i)
        for i in range(len(problems))
    ]
    answers = sample_groups(lm.model, lm.tokenizer, encoded, configs)
    out = []
    for p, group_answers in zip(problems, answers, strict=True):
        texts = [lm.tokenizer.decode(a.token_ids, skip_special_tokens=True) for a in group_answers]
        out.append([p.reward(t).reward for t in texts])
    return out


def _summary(problems: list[WordProblem], greedy: list, sampled: list) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for level in ("all", *sorted({p.level for p in problems})):
        idx = [i for i, p in enumerate(problems) if level in ("all", p.level)]
        groups = [sampled[i] for i in idx]
        report[level] = {
            "problems": len(idx),
            "greedy_accuracy": round(statistics.fmean(greedy[i][0] for i in idx), 3),
            "t1_accuracy": round(statistics.fmean(r for g in groups for r in g), 3),
            "zero_signal_groups": round(statistics.fmean(len(set(g)) == 1 for g in groups), 3),
            "all_wrong_groups": round(statistics.fmean(max(g) == 0 for g in groups), 3),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = SMOLLM2.path()
    if path is None:
        raise SystemExit(f"install the model first: {SMOLLM2.install_command}")
    load_before = os.getloadavg()
    started = time.perf_counter()
    lm = load_model(path, name=SMOLLM2.alias, device="cpu", dtype="float32")
    problems = generate_word_problems(args.problems, seed=args.seed, split="heldout")
    greedy: list[list[float]] = []
    sampled: list[list[float]] = []
    with torch.no_grad():
        for start in range(0, len(problems), 16):
            chunk = problems[start : start + 16]
            greedy += _rewards(lm, chunk, 0.0, 1, args, args.seed + start)
            sampled += _rewards(lm, chunk, 1.0, args.group_size, args, args.seed + start)
            so_far = _summary(problems[: len(greedy)], greedy, sampled)["all"]
            elapsed = time.perf_counter() - started
            print(f"{len(greedy)}/{len(problems)}, {elapsed:.0f} s: {so_far}", file=sys.stderr)
    report = {"group_size": args.group_size, "max_new_tokens": args.max_new_tokens}
    report |= _summary(problems, greedy, sampled)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["load_average_before_after"] = [load_before, os.getloadavg()]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
