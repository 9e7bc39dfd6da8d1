"""Write verl's own metrics log for the verl test run (tests/data/runs/verl/), with verl's code.

Run in the verl virtualenv (verl is not a dependency of this project)::

    PYTHONPATH=. .venv-verl/bin/python scripts/make_verl_metrics_fixture.py [RUN]

(RUN defaults to tests/data/runs/verl.)

For each step of the run's ``{step}.jsonl`` rollout dump it builds the batch verl's trainer
holds (prompts left-padded, responses right-padded, the tiny demo model's tokenizer), scores
each answer with the dump's ``score``, computes GRPO advantages with verl's
``compute_grpo_outcome_advantage``, per-token entropies of the demo model with verl's
``entropy_from_logits`` (aggregated as verl's trainer does, ``agg_loss`` token-mean:
``actor/entropy``), the batch metrics with verl's ``compute_data_metrics`` (``critic/score/mean``,
``response_length/mean``, ...), and logs them with verl's ``Tracking(default_backend="file")``,
whose ``FileLogger`` writes ``$VERL_FILE_LOGGER_ROOT/{project}/{experiment}.jsonl``: here
``RUN/gmts-fixture/tiny-arith-grpo.jsonl``. The numbers are of this run's answers; the file's
format is verl's own. A validation line (``val-core/...``) is logged at step 0, as verl's
trainer does before training.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl import DataProto
from verl.trainer.ppo.core_algos import agg_loss, compute_grpo_outcome_advantage
from verl.trainer.ppo.metric_utils import compute_data_metrics
from verl.utils.torch_functional import entropy_from_logits
from verl.utils.tracking import Tracking

from gmts_core.demo import DEMO_MODEL_DIR

PROJECT, EXPERIMENT = "gmts-fixture", "tiny-arith-grpo"


def step_batch(lines: list[dict], tok, model) -> tuple[DataProto, torch.Tensor]:
    prompts = [tok(line["input"], add_special_tokens=False)["input_ids"] for line in lines]
    answers = [tok(line["output"], add_special_tokens=False)["input_ids"] for line in lines]
    p_len, r_len = max(map(len, prompts)), max(map(len, answers))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    prompt_ids = torch.tensor([[pad] * (p_len - len(p)) + p for p in prompts])
    response_ids = torch.tensor([a + [pad] * (r_len - len(a)) for a in answers])
    prompt_mask = torch.tensor([[0] * (p_len - len(p)) + [1] * len(p) for p in prompts])
    response_mask = torch.tensor([[1] * len(a) + [0] * (r_len - len(a)) for a in answers])
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    entropys = entropy_from_logits(logits[:, p_len - 1 : -1])  # the logits predicting responses
    scores = torch.zeros(len(lines), r_len)
    last = response_mask.sum(-1) - 1
    scores[torch.arange(len(lines)), last] = torch.tensor([float(x["score"]) for x in lines])
    index = [line["input"] for line in lines]  # GRPO groups: answers to one prompt
    advantages, returns = compute_grpo_outcome_advantage(scores, response_mask, index)
    batch = DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores,
            "advantages": advantages,
            "returns": returns,
        }
    )
    return batch, entropys


def main(run: Path) -> None:
    os.environ["VERL_FILE_LOGGER_ROOT"] = str(run)
    out = run / PROJECT / f"{EXPERIMENT}.jsonl"
    if out.exists():
        out.unlink()
    tok = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR).eval()
    tracking = Tracking(project_name=PROJECT, experiment_name=EXPERIMENT, default_backend="file")
    steps = sorted(int(f.stem) for f in run.glob("*.jsonl") if f.stem.isdigit())
    first = [json.loads(s) for s in (run / f"{steps[0]}.jsonl").read_text().splitlines()]
    tracking.log(
        data={"val-core/arith/acc/mean@1": sum(x["acc"] for x in first) / len(first)}, step=0
    )
    for step in steps:
        lines = [json.loads(s) for s in (run / f"{step}.jsonl").read_text().splitlines()]
        batch, entropys = step_batch(lines, tok, model)
        metrics = compute_data_metrics(batch, use_critic=False)
        mask = batch.batch["response_mask"]
        metrics["actor/entropy"] = agg_loss(entropys, mask, loss_agg_mode="token-mean").item()
        tracking.log(data=metrics, step=step)
    tracking.finish()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/data/runs/verl"))
