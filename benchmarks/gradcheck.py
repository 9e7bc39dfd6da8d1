"""Cost of exact per-token gradients vs one forward + backward of the full GRPO loss.

Run: ``.venv/bin/python benchmarks/gradcheck.py [--answers 8 --tokens 64 --repeats 3 --json]``

Both sides see the same 8 answers x 64 answer tokens (random token ids after a demo prompt;
only the cost is measured, so the tokens need not make sense) on the bundled ``tiny-arith``
model, or on a random Llama of the same shape when the demo folder does not exist yet (the
output says which). The exact computation is
:func:`gmts_core.experiments.gradcheck.exact_token_gradients`
with six 20% selection masks (like the six selection methods); ``--loop`` also times it with
one backward per token instead of vmapped blocks. The baseline is what a trainer pays per
step: one padded forward over the 8 answers and one backward of the summed loss. Timings use
one torch thread by default (``--threads``): on a busy 2-core machine more threads can make
small models many times slower.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.func import functional_call

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.experiments.token_gradients import DEFAULT_BATCH_ELEMENTS, exact_token_gradients
from gmts_core.tasks.arith import format_prompt

METHODS = ("entropy", "gmts", "gmts_entropy", "surprisal", "random", "all")


def load_benchmark_model() -> tuple[torch.nn.Module, Any, str]:
    """The demo model, or a random Llama of the demo's shape (with a note saying so)."""
    if (DEMO_MODEL_DIR / "config.json").is_file():
        from gmts_core.model.loading import load_model

        lm = load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu", dtype="float32")
        return lm.model, lm.tokenizer, "tiny-arith (bundled demo model)"
    from gmts_core.demo.tokenizer import build_tokenizer
    from gmts_core.demo.train import ModelShape, build_model

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    model = build_model(ModelShape(), tokenizer).eval().requires_grad_(False)
    note = "random Llama of the demo's shape (gmts_core/demo/tiny-arith does not exist yet)"
    return model, tokenizer, note


def make_inputs(
    tokenizer: Any, vocab: int, answers: int, tokens: int, seed: int
) -> tuple[list[tuple[list[int], list[int]]], list[float], dict[str, torch.Tensor]]:
    """Sequences, loss coefficients w_i A_i (token_mean, half the answers right) and masks."""
    gen = torch.Generator().manual_seed(seed)
    prompt = list(tokenizer(format_prompt(47, 38, "+"))["input_ids"])
    seqs = [
        (prompt, torch.randint(0, vocab, (tokens,), generator=gen).tolist()) for _ in range(answers)
    ]
    rewards = torch.tensor([float(i % 2) for i in range(answers)])
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    coefs = (adv / (answers * tokens)).tolist()
    n = answers * tokens
    masks = {m: torch.rand(n, generator=gen) < 0.2 for m in METHODS[:-1]}
    masks["all"] = torch.ones(n, dtype=torch.bool)
    return seqs, coefs, masks


def full_loss_backward(
    model: torch.nn.Module, seqs: list[tuple[list[int], list[int]]], coefs: list[float]
) -> None:
    """One padded forward over all answers and one backward of L = -sum w_i A_i log pi."""
    params = {n: p.detach().requires_grad_(True) for n, p in model.named_parameters()}
    width = max(len(p) + len(a) for p, a in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, T) right-padded
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, (p, a) in enumerate(seqs):
        ids[row, : len(p) + len(a)], mask[row, : len(p) + len(a)] = torch.tensor(p + a), 1
    logits = functional_call(model, params, (ids,), {"attention_mask": mask, "use_cache": False})
    logp = logits.logits.log_softmax(-1)  # (B, T, V)
    loss = torch.zeros(())
    for row, ((p, a), coef) in enumerate(zip(seqs, coefs, strict=True)):
        lp = logp[row, len(p) - 1 : len(p) - 1 + len(a)].gather(-1, torch.tensor(a)[:, None])
        loss = loss - coef * lp.sum()
    loss.backward()


def timed(fn: Callable[[], object], repeats: int) -> dict[str, float]:
    fn()  # warm-up (allocations, first-call overheads)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "min_s": min(times)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    model, tokenizer, source = load_benchmark_model()
    vocab = model.get_output_embeddings().weight.shape[0]
    seqs, coefs, masks = make_inputs(tokenizer, vocab, args.answers, args.tokens, args.seed)
    results: dict[str, Any] = {
        "model": source,
        "parameters": sum(p.numel() for p in model.parameters()),
        "answers": args.answers,
        "answer_tokens": args.tokens,
        "prompt_tokens": len(seqs[0][0]),
        "torch_threads": torch.get_num_threads(),
        "repeats": args.repeats,
    }

    def exact(batch_elements: int) -> Callable[[], object]:
        return lambda: exact_token_gradients(
            model, seqs, coefs, 1.0, masks, "float32", batch_elements
        )

    results["full_loss_forward_backward"] = timed(
        lambda: full_loss_backward(model, seqs, coefs), args.repeats
    )
    results["exact_per_token_vmapped"] = timed(exact(DEFAULT_BATCH_ELEMENTS), args.repeats)
    if args.loop:
        results["exact_per_token_loop"] = timed(exact(1), args.repeats)
    base = results["full_loss_forward_backward"]["median_s"]
    results["slowdown_vmapped"] = results["exact_per_token_vmapped"]["median_s"] / base
    if args.loop:
        results["slowdown_loop"] = results["exact_per_token_loop"]["median_s"] / base
    return results


def print_table(r: dict[str, Any]) -> None:
    print(
        f"model: {r['model']}, {r['parameters']:,} parameters, torch threads {r['torch_threads']}"
    )
    print(
        f"{r['answers']} answers x {r['answer_tokens']} tokens "
        f"(+{r['prompt_tokens']} prompt tokens each), median of {r['repeats']} runs"
    )
    rows = [("one forward + backward of the full loss", "full_loss_forward_backward")]
    rows.append(("exact per-token gradients (vmapped blocks)", "exact_per_token_vmapped"))
    if "exact_per_token_loop" in r:
        rows.append(("exact per-token gradients (one backward per token)", "exact_per_token_loop"))
    base = r["full_loss_forward_backward"]["median_s"]
    for label, key in rows:
        t = r[key]["median_s"]
        print(f"  {label:<52} {t:8.3f} s  {t / base:7.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable timings)")
    parser.add_argument("--loop", action="store_true", help="also time one backward per token")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = run(args)
    if args.json:
        print(json.dumps(results))
    else:
        print_table(results)


if __name__ == "__main__":
    main()
