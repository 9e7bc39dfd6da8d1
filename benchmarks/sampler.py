"""Benchmark: our KV-cached sampler vs ``generate``, and where sampled answers' statistics
should come from.

Rollout of one RL step's batch (``--prompts`` prompts x ``--group-size`` answers, at most
``--max-new-tokens`` tokens, temperature 1) on the bundled ``tiny-arith`` model (or a random
Qwen2-0.5B-shaped one with ``--shape 0.5b``), four ways, interleaved ``--repeats`` times:

    generate   transformers' ``generate`` (``gmts_core.sampling.answers.hf_generate_answers``)
    generic    ``gmts_core.sampling.kv_sampler.decode`` with the model's own body at every step
    fused      ``decode`` with the fused step (``gmts_core.sampling.fused_decode``; Llama layouts)
    fused+stats  the same, computing every token's statistics from the logits it was drawn from

and the statistics two other ways, for the same answers:

    forward stats   the statistics from the logits of the RL step's training forward
                    (``stats_from_logits`` on ``answer_logits``, which the step runs anyway for
                    its gradient): their extra cost is the statistics alone
    separate forward  ``answer_token_stats``: a no-grad forward of its own (what an analysis of
                    sampled answers would need without the sampler's statistics)

Every answer is forced to ``--max-new-tokens`` tokens (``min_new_tokens``) unless ``--natural``,
so the paths do the same work. Also checked: the sampler's statistics equal the separate
forward's (max abs difference of the log-probs).

    .venv/bin/python benchmarks/sampler.py --json
    .venv/bin/python benchmarks/sampler.py --device cuda --shape 0.5b --json     # on a GPU
    .venv/bin/python benchmarks/sampler.py --prompts 2 --group-size 2 --max-new-tokens 8 --repeats 1
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _common import emit, machine, median

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.experiments.evaluation import demo_batch
from gmts_core.model.loading import load_model
from gmts_core.sampling.answers import SamplingConfig, hf_generate_answers
from gmts_core.sampling.kv_sampler import DecodeRequest, decode
from gmts_core.sampling.sampler_probe import unserved_reason
from gmts_core.stats.forward import answer_logits, answer_token_stats, stats_from_logits
from gmts_core.stats.tokenization import encode_prompt


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--natural", action="store_true", help="answers stop at EOS (not forced)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--shape", choices=["demo", "0.5b"], default="demo")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def _model(args: argparse.Namespace) -> tuple[Any, Any]:
    lm = load_model(DEMO_MODEL_DIR, name="tiny-arith", device=args.device, dtype="float32")
    if args.shape == "0.5b":  # Qwen2-0.5B's shape, random weights, the demo tokenizer
        from transformers import AutoModelForCausalLM, Qwen2Config

        config = Qwen2Config(
            vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, eos_token_id=1, pad_token_id=0,
        )  # fmt: skip
        dtype = torch.bfloat16 if args.device != "cpu" else torch.float32
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(args.device).eval()
        return model, lm.tokenizer
    return lm.model, lm.tokenizer


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    model, tok = _model(args)
    if not args.natural:
        model.generation_config.min_new_tokens = args.max_new_tokens
    prompts = [encode_prompt(tok, p.prompt, None) for p in demo_batch(args.prompts, 0)]
    width = len(prompts[0])
    prompts = [p for p in prompts if len(p) == width]  # one bucket (the demo's are all equal)
    config = SamplingConfig(args.group_size, 1.0, max_new_tokens=args.max_new_tokens)
    served = unserved_reason(model)
    eos = {int(tok.eos_token_id)}

    def ours(fused: bool, stats: bool) -> Callable[[], Any]:
        request = DecodeRequest(
            args.group_size, args.max_new_tokens, 1.0, fused=fused,
            stats_temperature=1.0 if stats else None,
        )  # fmt: skip
        return lambda: decode(model, prompts, request, eos)

    answers = ours(True, True)()
    seqs = [(prompts[i // args.group_size], a.token_ids) for i, a in enumerate(answers)]

    def forward_stats() -> Any:  # the training forward runs anyway: time the statistics only
        with torch.no_grad():
            hidden, logits = answer_logits(model, seqs, 0)
        start = time.perf_counter()
        stats_from_logits(logits, hidden, seqs, 1.0, 0)
        _sync(args.device)
        return time.perf_counter() - start

    contenders: dict[str, Callable[[], Any]] = {
        "generate": lambda: hf_generate_answers(model, tok, prompts, config),
        "generic": ours(False, False),
        "fused": ours(True, False),
        "fused+stats": ours(True, True),
        "separate_forward": lambda: answer_token_stats(model, seqs, 0, 1.0),
    }
    times: dict[str, list[float]] = {k: [] for k in [*contenders, "forward_stats"]}
    for k in contenders:
        contenders[k]()  # warm-up
    for r in range(args.repeats):
        names = list(contenders)
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
            _sync(args.device)
            start = time.perf_counter()
            with torch.no_grad():
                contenders[name]()
            _sync(args.device)
            times[name].append(time.perf_counter() - start)
        times["forward_stats"].append(forward_stats())
    (check,) = answer_token_stats(model, seqs[:1], 0, 1.0)
    assert answers[0].stats is not None
    diff = float((answers[0].stats.stats.logprob - check.stats.logprob).abs().max())
    med = {k: median(v) for k, v in times.items()}
    return {
        "benchmark": "sampler",
        "shape": args.shape,
        "device": args.device,
        "rows": len(prompts) * args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "forced_length": not args.natural,
        "served": served is None,
        "unserved_reason": served,
        "median_s": med,
        "times_s": times,
        "ratios": {
            "fused_vs_generate": med["fused"] / med["generate"],
            "generic_vs_generate": med["generic"] / med["generate"],
            "sampler_stats_extra_vs_forward_stats": (med["fused+stats"] - med["fused"])
            / med["forward_stats"],
        },
        "max_abs_logprob_diff_sampler_vs_forward": diff,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rep = measure(args)
    m, r = rep["median_s"], rep["ratios"]
    lines = [
        f"rollout of {rep['rows']} rows x {args.max_new_tokens} tokens ({args.shape}, "
        f"{args.device}), median of {args.repeats}, load {rep['machine']['load_average_1m']}",
        *(f"  {k:17s} {v:.4f} s" for k, v in m.items()),
        f"  fused / generate {r['fused_vs_generate']:.2f}, generic / generate "
        f"{r['generic_vs_generate']:.2f}",
        f"  statistics while sampling cost {m['fused+stats'] - m['fused']:.4f} s extra vs "
        f"{m['forward_stats']:.4f} s from the training forward's logits "
        f"({r['sampler_stats_extra_vs_forward_stats']:.2f}x); a separate forward "
        f"{m['separate_forward']:.4f} s",
        f"  max |log-prob difference| sampler vs forward: "
        f"{rep['max_abs_logprob_diff_sampler_vs_forward']:.2e}",
    ]
    emit(rep, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
