"""Write the miles test run (tests/data/runs/miles/): Parquet files written as miles writes them.

miles itself cannot run here (Ray, Megatron, SGLang), so the samples are the real TRL run's
(tests/data/runs/trl: 3 steps, 3 prompts x 4 answers), tokenized with the demo model's tokenizer,
with the demo model's log-probs and entropies of the sampled tokens; the files are written by
the same polars calls as miles:

- ``dashboard_columns/rollout_{N}.parquet``: ``save_dashboard_columns`` in
  ``miles/ray/rollout/debug_data.py`` (radixark/miles @ 31f1ca961): the same schema dict,
  ``pl.DataFrame(rows, schema=schema)`` and ``frame.write_parquet(tmp, row_group_size=8)`` then
  ``tmp.replace(path)``;
- ``dashboard/cache/rollout_{N}.parquet`` for rollouts 0 and 1 only (the dashboard summarises a
  step when it is looked at): ``DumpReader.summary`` in ``miles/dashboard/dump_reader.py``,
  ``pl.DataFrame(rows, strict=False).write_parquet(cache_path)``, one row per sample with the
  columns of ``DumpReader._summary_row`` (reward and advantage: the TRL run's; the fields a CPU
  run has no value for, null).

Every second answer of a step is an agentic one: a tool's output (`` [tool: 7]``) spliced into
its middle as miles' multi-turn rollout appends it (``miles/rollout/generate_hub/multi_turn.py``
calls ``update_sample_with_tool_responses`` of ``miles/rollout/generate_utils/tool_call_utils.py``
@ ce05e49a5: the tool's tokens join ``tokens`` and ``response_length`` with ``loss_mask`` 0 and
``rollout_log_probs`` 0.0); the answer's own tokens after it are scored with the tool's tokens in
their context. The tool text is tokenized plainly (the demo tokenizer has no tool template).

miles' pickle files (``rollout_data/{N}.pt``, ``train_data/{N}_{rank}.pt``) are not written:
this tool never reads them. Rollout ids count from 0 (TRL step N is rollout N - 1).

Run with polars on the path (not a dependency of this project)::

    pip install --target /tmp/polarslib polars==2.0.0
    PYTHONPATH=/tmp/polarslib .venv/bin/python scripts/make_miles_fixture.py [OUT]

(OUT defaults to tests/data/runs/miles.)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import polars as pl
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gmts_core.demo import DEMO_MODEL_DIR

TRL = Path("tests/data/runs/trl/completions")
SUMMARISED = {0, 1}  # rollouts the dashboard has summarised (its cache exists)
TOOL = " [tool: 7]"  # a tool's output inside every second answer (loss_mask 0)


def save_dashboard_columns(samples: list[dict], path: Path) -> None:
    """miles' writer, as in miles/ray/rollout/debug_data.py (``sample`` attributes as keys)."""
    schema = dict(
        sample_index=pl.Int32,
        response_length=pl.Int32,
        total_length=pl.Int32,
        tokens=pl.List(pl.Int32),
        loss_mask=pl.List(pl.Int8),
        rollout_log_probs=pl.List(pl.Float32),
    )
    frame = pl.DataFrame(
        [
            dict(
                sample_index=sample["index"],
                response_length=sample["response_length"],
                total_length=len(sample["tokens"]),
                tokens=list(sample["tokens"]),
                loss_mask=sample["loss_mask"],
                rollout_log_probs=sample["rollout_log_probs"],
            )
            for sample in samples
        ],
        schema=schema,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    frame.write_parquet(tmp, row_group_size=8)
    tmp.replace(path)


def summary_row(sample: dict) -> dict:
    """``DumpReader._summary_row``'s columns for a sample with a train row."""
    return dict(
        sample_index=sample["index"],
        group_index=sample["group_index"],
        status="completed",
        remove_sample=False,
        response_length=sample["response_length"],
        total_length=len(sample["tokens"]),
        reward=sample["reward"],
        weight_version=None,
        weight_version_min=None,
        mixed_version=None,
        staleness=None,
        turns=None,
        tool_calls=None,
        non_generation_time=None,
        spec_accept_rate=None,
        prefix_cache_hit_rate=None,
        raw_reward=sample["reward"],
        normalized_reward=sample["advantage"],
        truncated=False,
        dumped_rank=0,
        mean_entropy=sample["mean_entropy"],
        max_entropy=sample["max_entropy"],
        ref_entropy_mean=None,
        mean_abs_lp_diff=0.0,
        max_abs_lp_diff=0.0,
        mean_imp_ratio=1.0,
        adv_mean=sample["advantage"],
        adv_std=0.0,
        return_mean=sample["advantage"],
        alignment_failed=False,
    )


def samples_of(df: pd.DataFrame, rollout_id: int, tok, model) -> list[dict]:
    prompts = list(dict.fromkeys(df["prompt"]))
    out = []
    for i, row in enumerate(df.itertuples()):
        prompt = tok(row.prompt, add_special_tokens=False)["input_ids"]
        answer = tok(row.completion, add_special_tokens=False)["input_ids"]
        mask = [1] * len(answer)
        if i % 2 == 1:  # an agentic turn: update_sample_with_tool_responses' span
            tool = tok(TOOL, add_special_tokens=False)["input_ids"]
            cut = len(answer) // 2
            answer = answer[:cut] + tool + answer[cut:]
            mask = mask[:cut] + [0] * len(tool) + mask[cut:]
        answer, mask = answer + [tok.eos_token_id], mask + [1]
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        logp = torch.log_softmax(logits, -1)
        entropy = -(logp.exp() * logp).sum(-1)
        chosen = logp.gather(1, torch.tensor(answer)[:, None])[:, 0]
        trained = torch.tensor(mask, dtype=torch.bool)
        entropy = entropy[trained]  # the dashboard's statistics are over trained tokens
        out.append(
            dict(
                index=rollout_id * len(df) + i,
                group_index=prompts.index(row.prompt),
                tokens=prompt + answer,
                response_length=len(answer),
                loss_mask=mask,
                # miles appends 0.0 as the rollout log-prob of a tool's token
                rollout_log_probs=[
                    float(v) if m else 0.0 for v, m in zip(chosen, mask, strict=True)
                ],
                reward=float(row.numeric_reward),
                advantage=float(row.advantage),
                mean_entropy=float(entropy.mean()),
                max_entropy=float(entropy.max()),
            )
        )
    return out


def main(out: Path) -> None:
    for folder in (out / "dashboard_columns", out / "dashboard"):  # README.md stays
        if folder.exists():
            shutil.rmtree(folder)
    tok = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR).eval()
    for f in sorted(TRL.glob("completions_*.parquet")):
        rollout_id = int(f.stem.split("_")[1]) - 1
        samples = samples_of(pd.read_parquet(f), rollout_id, tok, model)
        name = f"rollout_{rollout_id}.parquet"
        save_dashboard_columns(samples, out / "dashboard_columns" / name)
        if rollout_id in SUMMARISED:
            cache = out / "dashboard" / "cache"
            cache.mkdir(parents=True, exist_ok=True)
            pl.DataFrame([summary_row(s) for s in samples], strict=False).write_parquet(
                cache / name
            )
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/data/runs/miles"))
