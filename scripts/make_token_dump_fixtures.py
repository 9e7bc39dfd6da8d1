"""Write the per-token dump test runs (tests/data/runs/{prime_rl,nemo_rl,open_instruct}/), each
serialised by its trainer's own writer code, reproduced here line for line (the trainers need
GPUs, Ray or vLLM and cannot run on this machine):

- prime-rl @ 559b44772e471d1538537b8805cc77f3824a5e64,
  ``src/prime_rl/trainer/rl/token_export.py``: ``TokenExporter.export`` / ``_write`` /
  ``_export_columns`` / ``_compute_export_tensors`` (``json.dumps(record, separators=(",",
  ":"), allow_nan=False)``, float32 values, a ``STABLE`` file per finished step);
- NeMo-RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909, ``nemo_rl/algorithms/grpo.py`` ("Log
  training data": the ``log_data`` keys in that order) and ``nemo_rl/utils/logger.py``
  ``Logger.log_batched_dict_as_jsonl`` (one line per one-sample slice, ``json.dumps({**sample,
  "idx": i}, default=str)``);
- open-instruct @ e6c3044aa6201c8bfa4573c1b03142af599e730d, ``open_instruct/rl_utils.py``
  ``RolloutRecord`` / ``_save_rollouts`` / ``save_rollout_metadata`` (``json.dumps(asdict(
  record))``, appended per step) with the advantages of ``open_instruct/data_loader.py``;
- slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515, ``slime/observability/rollout_data_utils.py``
  ``save_debug_rollout_data`` (``torch.save({"rollout_id", "samples"})``) with
  ``slime/utils/types.py`` ``Sample.to_dict``.

The samples are the real TRL run's (tests/data/runs/trl: 3 steps, 3 prompts x 4 answers) as in
scripts/make_miles_fixture.py, tokenized with the demo model's tokenizer. An agentic turn is
added to every second answer: a tool output (" [tool: 7]") spliced into its middle, which the
trainers' loss masks leave out (loss mask 0). The trainer's log-probs and entropies are the demo
model's in float32; the inference engine's are the same model's in bfloat16 (a real source of
train/inference mismatch: the engine's lower precision).

Run: .venv/bin/python scripts/make_token_dump_fixtures.py [OUT_ROOT]   (default tests/data/runs)
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gmts_core.demo import DEMO_MODEL_DIR

TRL = Path("tests/data/runs/trl/completions")
TOOL = " [tool: 7]"
RUN_NAME = "gmts_fixture"


def per_position(model: torch.nn.Module, ids: list[int]) -> tuple[list[float], list[float]]:
    """Log-prob and entropy (nats) of each token given the ones before it, shifted right as
    prime-rl's ``shift_tensor_right`` does (position t: token t; position 0: log(1/V), log V)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits, -1)
    chosen = logp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    entropy = -(logp.exp() * logp).sum(-1)[:-1]
    vocab = logits.shape[-1]
    return [math.log(1.0 / vocab)] + chosen.tolist(), [math.log(vocab)] + entropy.tolist()


def samples(tok, model32, model16) -> list[tuple[int, list[dict]]]:
    out = []
    for f in sorted(TRL.glob("completions_*.parquet")):
        df = pd.read_parquet(f)
        prompts = list(dict.fromkeys(df["prompt"]))
        rows = []
        for i, row in enumerate(df.itertuples()):
            prompt = tok(row.prompt, add_special_tokens=False)["input_ids"]
            answer = tok(row.completion, add_special_tokens=False)["input_ids"]
            mask = [1] * len(answer)
            if i % 2 == 1:  # an agentic turn: the tool's output, not trained
                tool = tok(TOOL, add_special_tokens=False)["input_ids"]
                cut = len(answer) // 2
                answer = answer[:cut] + tool + answer[cut:]
                mask = mask[:cut] + [0] * len(tool) + mask[cut:]
            answer, mask = answer + [tok.eos_token_id], mask + [1]
            ids = prompt + answer
            trainer_lp, entropy = per_position(model32, ids)
            inference_lp, _ = per_position(model16, ids)
            rows.append(
                dict(
                    prompt=prompt,
                    answer=answer,
                    mask=[0] * len(prompt) + mask,
                    trainer_lp=trainer_lp,
                    entropy=entropy,
                    # the engine reports log-probs of the tokens it sampled only
                    inference_lp=[0.0] * len(prompt) + inference_lp[len(prompt) :],
                    reward=float(row.numeric_reward),
                    advantage=float(row.advantage),
                    prompt_idx=prompts.index(row.prompt),
                    text=row.prompt + row.completion,
                    prompt_text=row.prompt,
                    completion_text=row.completion,
                )
            )
        out.append((int(df["step"].iloc[0]), rows))
    return out


# --- prime-rl: token_export.py -------------------------------------------------------------


def _json_float(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _floats(values: list[float]) -> list[float | None]:
    return [_json_float(v) for v in torch.tensor(values, dtype=torch.float32).tolist()]


def write_prime_rl(root: Path, steps: list[tuple[int, list[dict]]]) -> None:
    for step, rows in steps:
        step_dir = root / "token_exports" / f"step_{step}"
        step_dir.mkdir(parents=True, exist_ok=True)
        export_file = step_dir / "rank_0.jsonl"
        for n, r in enumerate(rows):
            ids = r["prompt"] + r["answer"]
            length = len(ids)
            trainer = torch.tensor(r["trainer_lp"], dtype=torch.float32)
            inference = torch.tensor(r["inference_lp"], dtype=torch.float32)
            log_ratio = trainer - inference  # compute_importance_ratio_and_mismatch_kl
            ratio = torch.exp(log_ratio)
            mismatch_kl = ratio - log_ratio - 1
            prob_delta = torch.exp(trainer) - torch.exp(inference)
            loss_mask = [bool(m) for m in r["mask"]]
            advantages = [r["advantage"] if m else 0.0 for m in loss_mask]
            adv = torch.tensor(advantages)
            mask_t = torch.tensor(loss_mask)
            invalid_high, invalid_low = prob_delta > 0.2, prob_delta < -0.2  # dppo_mask_high/low
            invalid = torch.where(adv > 0, invalid_high, invalid_low)
            columns = {
                "token_ids": ids,
                "position_ids": list(range(length)),
                "loss_mask": loss_mask,
                "advantages": _floats(advantages),
                "inference_logprobs": _floats(r["inference_lp"]),
                "trainer_logprobs": _floats(r["trainer_lp"]),
                "entropy": _floats(r["entropy"]),
                "mismatch_kl": _floats(mismatch_kl.tolist()),
                "log_importance_ratio": _floats(log_ratio.tolist()),
                "importance_ratio": _floats(ratio.tolist()),
                "prob_delta": _floats(prob_delta.tolist()),
                "is_masked": [bool(v) for v in (mask_t & invalid).tolist()],
                "is_masked_high": [bool(v) for v in (mask_t & (adv > 0) & invalid_high).tolist()],
                "is_masked_low": [bool(v) for v in (mask_t & (adv < 0) & invalid_low).tolist()],
                "rl_weights": [None] * length,
                "ce_weights": [None] * length,
                "ref_kl_weights": [None] * length,
            }
            record = {
                "schema_version": 1,
                "step": step,
                "rank": 0,
                "micro_step": n // 4,
                "micro_sequence_idx": n % 4,
                "export_sequence_idx": n,
                "env_name": "arith",
                **columns,
            }
            with export_file.open("a" if n else "w", encoding="utf-8") as file:
                file.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        (step_dir / "STABLE").touch()


# --- NeMo-RL: grpo.py + Logger.log_batched_dict_as_jsonl ----------------------------------------


def write_nemo_rl(root: Path, steps: list[tuple[int, list[dict]]], pad_id: int) -> None:
    folder = root / "logs" / "exp_001"
    folder.mkdir(parents=True, exist_ok=True)
    for step, rows in steps:
        width = max(len(r["prompt"]) + len(r["answer"]) for r in rows)

        def padded(values: list, fill, width: int = width) -> list:
            return values + [fill] * (width - len(values))

        log_data = {
            "content": [r["text"] for r in rows],
            "rewards": torch.tensor([r["reward"] for r in rows]).tolist(),
            "input_lengths": [len(r["prompt"]) + len(r["answer"]) for r in rows],
            "token_ids": [padded(r["prompt"] + r["answer"], pad_id) for r in rows],
            "token_loss_mask": [padded(r["mask"], 0) for r in rows],
            "sample_loss_mask": [1.0] * len(rows),
            "advantages": torch.tensor(
                [padded([r["advantage"] * m for m in r["mask"]], 0.0) for r in rows]
            ).tolist(),
            "generation_logprobs": torch.tensor(
                [padded(r["inference_lp"], 0.0) for r in rows]
            ).tolist(),
            "prev_logprobs": torch.tensor(
                [padded([0.0] + r["trainer_lp"][1:], 0.0) for r in rows]
            ).tolist(),
        }
        with open(folder / f"train_data_step{step}.jsonl", "w") as f:
            for i in range(len(rows)):
                sample = {k: v[i : i + 1] for k, v in log_data.items()}  # BatchedDataDict.slice
                f.write(json.dumps({**sample, "idx": i}, default=str) + "\n")


# --- open-instruct: rl_utils.py ---------------------------------------------------------------


@dataclass
class RolloutRecord:
    step: int
    sample_idx: int
    prompt_idx: int
    prompt_tokens: list[int]
    response_tokens: list[int]
    reward: float
    advantage: float
    finish_reason: str
    dataset: str
    ground_truth: list[int] | None = None
    request_info: dict | None = None
    logprobs: list[float] | None = None


def write_open_instruct(root: Path, steps: list[tuple[int, list[dict]]]) -> None:
    folder = root  # the rollouts_save_path
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {
        "run_name": RUN_NAME,
        "git_commit": "e6c3044a",
        "model_name": "tiny-arith",
        "timestamp": "2026-12-06T00:00:00+00:00",
    }
    (folder / f"{RUN_NAME}_metadata.jsonl").write_text(json.dumps(metadata) + "\n")
    for step, rows in steps:
        scores = np.array([r["reward"] for r in rows])
        per_prompt = scores.reshape(-1, 4)
        mean = np.repeat(per_prompt.mean(axis=-1), 4, axis=0)
        std = np.repeat(per_prompt.std(axis=-1), 4, axis=0)
        advantages = (scores - mean) / (std + 1e-8)  # advantage_normalization_type="standard"
        order = sorted(range(len(rows)), key=lambda i: rows[i]["prompt_idx"])  # queries grouped
        records = []
        for i, k in enumerate(order):
            r = rows[k]
            records.append(
                asdict(
                    RolloutRecord(
                        step=step,
                        sample_idx=i,
                        prompt_idx=i // 4,
                        prompt_tokens=r["prompt"],
                        # the tool's output stays in the response (open-instruct saves no mask)
                        response_tokens=r["answer"],
                        reward=float(scores[k]),
                        advantage=float(advantages[k]),
                        finish_reason="stop",
                        dataset="arith",
                        ground_truth=None,
                        request_info=None,
                        logprobs=r["inference_lp"][len(r["prompt"]) :],
                    )
                )
            )
        with open(folder / f"{RUN_NAME}_rollouts_{0:06d}.jsonl", "a") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")


# --- slime: rollout_data_utils.save_debug_rollout_data + Sample.to_dict ------------------------


def write_slime(root: Path, steps: list[tuple[int, list[dict]]]) -> None:
    """``torch.save({"rollout_id": N, "samples": [sample.to_dict() ...]}, path)``, each dict
    the ``Sample`` dataclass's ``__dict__`` (its fields in declaration order, defaults where a
    CPU run has no value) with ``status`` as its value and the two info dataclasses as dicts."""
    folder = root / "rollout_data"
    folder.mkdir(parents=True, exist_ok=True)
    for step, rows in steps:
        rollout_id = step - 1
        samples = []
        for i, r in enumerate(rows):
            samples.append(
                {
                    "group_index": rollout_id * 3 + r["prompt_idx"],
                    "index": rollout_id * len(rows) + i,
                    "rollout_id": None,
                    "prompt": r["prompt_text"],
                    "tokens": r["prompt"] + r["answer"],
                    "multimodal_inputs": None,
                    "multimodal_train_inputs": None,
                    "multimodal_train_input_id": None,
                    "apply_chat_template_kwargs": {},
                    "response": r["completion_text"],
                    "response_length": len(r["answer"]),
                    "label": None,
                    "reward": r["reward"],
                    "loss_mask": r["mask"][len(r["prompt"]) :],
                    "weight_versions": [],
                    "rollout_log_probs": r["inference_lp"][len(r["prompt"]) :],
                    "rollout_top_p_token_ids": None,
                    "rollout_top_p_token_offsets": None,
                    "rollout_routed_experts": None,
                    "remove_sample": False,
                    "teacher_log_probs": None,
                    "status": "completed",
                    "metadata": {},
                    "generate_function_path": None,
                    "custom_rm_path": None,
                    "train_metadata": None,
                    "session_id": None,
                    "non_generation_time": 0.0,
                    "spec_info": {
                        "spec_accept_token_num": 0,
                        "spec_draft_token_num": 0,
                        "spec_verify_ct": 0,
                        "completion_token_num": 0,
                    },
                    "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0},
                }
            )
        torch.save({"rollout_id": rollout_id, "samples": samples}, folder / f"{rollout_id}.pt")


def main(root: Path) -> None:
    tok = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    model32 = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR).eval()
    model16 = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR, dtype=torch.bfloat16).eval()
    steps = samples(tok, model32, model16)
    for name in ("prime_rl", "nemo_rl", "open_instruct", "slime"):
        readme = root / name / "README.md"  # the fixture's citation stays
        kept = readme.read_text() if readme.is_file() else None
        shutil.rmtree(root / name, ignore_errors=True)
        if kept is not None:
            readme.parent.mkdir(parents=True)
            readme.write_text(kept)
    write_prime_rl(root / "prime_rl", steps)
    write_nemo_rl(root / "nemo_rl", steps, tok.pad_token_id or tok.eos_token_id)
    write_open_instruct(root / "open_instruct", steps)
    write_slime(root / "slime", steps)
    print(f"wrote {root}/prime_rl, nemo_rl, open_instruct, slime")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/data/runs"))
