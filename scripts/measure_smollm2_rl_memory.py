"""Where a live-RL step's memory goes on the real model ``smollm2-135m``: the training part of a
step (token statistics, forward, backward) on 4 prompts x 4 answers of fixed token ids (prompts
of 40 tokens, answers of 64: the small batch at full length; no sampling), in one torch thread,
with the resident set and its peak after each part.

    python scripts/measure_smollm2_rl_memory.py            # a session's knobs on the model
    python scripts/measure_smollm2_rl_memory.py --fused    # the fused training forward

The session's knobs (``SMOLLM2.rl_defaults``): a no-grad statistics pass (``fused_max_tokens``
0), then forward and backward one group of 4 answers at a time (``max_batch_tokens`` 512).
``--fused``: the statistics from one training forward over all 16 answers whose graph is held
for the backward (RLConfig's defaults). Run each in its own process: the peak is the process's.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from gmts_core.config import RLConfig
from gmts_core.grpo.forward import answer_statistics, policy_micro_batches
from gmts_core.grpo.loss import answer_logprobs
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.model.loading import load_model
from gmts_core.model.packaged import SMOLLM2


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fused", action="store_true", help="RLConfig's fused training forward")
    args = p.parse_args()
    torch.set_num_threads(1)
    path = SMOLLM2.path()
    if path is None:
        raise SystemExit(SMOLLM2.install_command)
    lm = load_model(path, name=SMOLLM2.alias, device="cpu", dtype="float32")
    policy = TrainablePolicy(lm, PolicySettings(kind="lora"))
    knobs = {} if args.fused else dict(SMOLLM2.rl_defaults)
    knobs.update(group_size=4, prompts_per_step=4, max_new_tokens=64)
    config = RLConfig(**knobs, chat_template=True)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(0)
    seqs = []
    for _ in range(4):
        prompt = torch.randint(100, 40000, (40,), generator=g).tolist()
        seqs += [(prompt, torch.randint(100, 40000, (64,), generator=g).tolist()) for _ in range(4)]
    parts = policy_micro_batches(policy, seqs, config)
    rows = [{"part": "loaded", "rss_mb": rss_mb(), "peak_mb": peak_mb()}]
    cpu = time.process_time()
    stats, held = answer_statistics(policy, seqs, parts, config)
    rows.append({"part": "statistics", "cpu_s": time.process_time() - cpu, "rss_mb": rss_mb(),
                 "peak_mb": peak_mb(), "graph_held": held is not None})  # fmt: skip
    cpu = time.process_time()
    for j, (idx, _) in enumerate(parts):
        if held is not None:
            logp = held[j]
        else:
            group = [seqs[i] for i in idx]
            logp = answer_logprobs(policy.model, group, policy.tokenizer.pad_token_id, 1.0, True)
        logp.sum().backward()
    name = "forward+backward" if held is None else "backward"
    rows.append({"part": name, "cpu_s": time.process_time() - cpu, "rss_mb": rss_mb(),
                 "peak_mb": peak_mb()})  # fmt: skip
    for row in rows:
        print(json.dumps({**row, "parts": len(parts), "fused": args.fused}))


if __name__ == "__main__":
    main()
