"""Benchmark: what the analysis costs on a real-size model, against the model's own bare passes.

A Qwen2-0.5B-shaped model (24 layers, hidden 896, vocabulary 151,936; ``--shape 7b``: a
Qwen2-7B-shaped one) is built in this script with random weights (nothing is downloaded), with a
word-level tokenizer over the whole vocabulary (token ``t<id>``), so that any sampled id decodes.
For ``--answers`` answers of exactly ``--tokens`` tokens to one prompt (default 8 x 256):

    given       ``gmts_core.analysis.analyze.analyze`` of given answers (every statistic, the
    default selection methods, top-5 alternatives, summaries, records) vs
      forward     one bare forward over prompt + answers that returns the full logits, and
      body        the transformer body alone (final hidden states, no LM head)
    sampled     ``analyze`` that samples the answers vs
      generate    one bare batched ``generate`` of the same tokens (same seed; checked)

Both sampling paths are forced to the full length (``min_new_tokens`` on the model's
generation config). The forward contenders run ``--repeats`` times (default 3), the sampled pair
``--sampled-repeats`` times (default 1: one generate of 8 x 256 tokens costs as much as several
forwards), the contenders alternating in a rotated order each repeat. Each ratio is taken per
repeat (two runs seconds apart, so both saw the same machine load) and reported as the median
and range over the repeats; process CPU time ratios (all threads) are reported too, as they are
steadier than wall time on a shared machine. Peak memory is the peak above the memory held
before the run (CPU: the process's peak resident set size, reset through /proc/self/clear_refs;
CUDA: ``torch.cuda.max_memory_allocated``).
Targets: given / forward <= 1.0, sampled / generate <= 1.2. Only ``gmts_core`` is imported
(no web stack), so this runs on a bare GPU machine too.

    python benchmarks/real_size.py --json                      # 0.5B, 8 x 256, CPU float32
    python benchmarks/real_size.py --device cuda --dtype bfloat16 --shape 7b \\
        --answers 16 --tokens 1024 --no-sampled --json         # 7B-shaped, on a GPU
    python benchmarks/real_size.py --layers 1 --hidden 64 --vocab 2000 --answers 2 --tokens 8
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.model.loading import LoadedModel
from gmts_core.sampling.answers import SamplingConfig
from gmts_core.stats.tokenization import encode_prompt

TARGET_GIVEN = 1.0
TARGET_SAMPLED = 1.2
SHAPES = {  # the published configs' sizes (random weights here)
    "0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
    ),
    "7b": dict(
        hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
    ),
}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    p.add_argument("--layers", type=int, help="override the number of layers (quick runs)")
    p.add_argument("--hidden", type=int, help="override the hidden size (quick runs)")
    p.add_argument("--vocab", type=int, help="override the vocabulary size (quick runs)")
    p.add_argument("--answers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=256, help="tokens per answer")
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--repeats", type=int, default=3, help="repeats of the forward contenders")
    p.add_argument(
        "--sampled-repeats", type=int, default=1, help="repeats of the sampled pair (<= repeats)"
    )
    p.add_argument("--no-sampled", action="store_true", help="skip sampled analysis/generate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p.parse_args(argv)


def build_model(args: argparse.Namespace) -> LoadedModel:
    """A Qwen2-shaped causal LM with random weights and a word-level tokenizer over its ids."""
    shape = dict(SHAPES[args.shape])
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    if args.hidden:
        heads = max(1, args.hidden // 64)
        shape.update(hidden_size=args.hidden, intermediate_size=4 * args.hidden)
        shape.update(num_attention_heads=heads, num_key_value_heads=1)
    if args.vocab:
        shape["vocab_size"] = args.vocab
    vocab = shape["vocab_size"]
    config = Qwen2Config(
        **shape,
        max_position_embeddings=max(4096, args.prompt_tokens + args.tokens + 8),
        rope_theta=1_000_000.0,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
    )
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype, on its device: no full-size copies
    try:
        with torch.device(args.device):
            model = Qwen2ForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    model.generation_config.eos_token_id = 1
    model.generation_config.pad_token_id = 2
    specials = ["<s>", "</s>", "<pad>", "<unk>"]  # ids 0-3; every other id i is the word t<i>
    words = {**{t: i for i, t in enumerate(specials)}, **{f"t{i}": i for i in range(4, vocab)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    name = f"random Qwen2-{args.shape}-shaped"
    return LoadedModel(name, "built in benchmarks/real_size.py", model, tokenizer)


class Peak:
    """Peak memory above the memory held at the start of a ``with`` block."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.bytes = 0

    def __enter__(self) -> Peak:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
        else:
            self._reset = _rss_reset()
            self._base = _rss("VmRSS") if self._reset else _rss("VmHWM")
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            self.bytes = max(torch.cuda.max_memory_allocated() - self._base, 0)
        else:
            self.bytes = max(_rss("VmHWM") - self._base, 0)


def _rss_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def _rss(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(fn: Callable[[], Any], device: str) -> tuple[float, float, int, Any]:
    """Wall seconds, process CPU seconds, peak extra bytes and the result of one run of ``fn``."""
    with Peak(device) as peak:
        start, cpu = time.perf_counter(), time.process_time()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, peak.bytes, out


def spread(values: list[float]) -> dict[str, float]:
    """Median and range of per-repeat values."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


SAMPLED = ("sampled_analysis", "bare_generate")
PAIRS = {  # ratio name: (numerator, denominator), both run in the same repeat
    "given_vs_full_logit_forward": ("given_analysis", "full_logit_forward"),
    "given_vs_body_forward": ("given_analysis", "body_forward"),
    "sampled_vs_bare_generate": SAMPLED,
}


def per_repeat_ratios(times: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Each pair's ratio per repeat (both run in that repeat), with median and range."""
    out: dict[str, dict[str, Any]] = {}
    for name, (a, b) in PAIRS.items():
        if a in times and b in times:
            values = [x / y for x, y in zip(times[a], times[b], strict=False) if y > 0]
            out[name] = {**spread(values), "values": values}
    return out


def contenders(
    lm: LoadedModel, args: argparse.Namespace
) -> tuple[dict[str, Callable[[], Any]], list[list[int]]]:
    """Every timed operation, as a no-argument function, and the given answers' token ids."""
    gen = torch.Generator().manual_seed(args.seed + 1)
    vocab = lm.vocab_size
    prompt = " ".join(
        f"t{i}" for i in torch.randint(4, vocab, (args.prompt_tokens,), generator=gen)
    )
    answers = [
        " ".join(f"t{i}" for i in torch.randint(4, vocab, (args.tokens,), generator=gen).tolist())
        for _ in range(args.answers)
    ]
    rewards = [float(i % 2) for i in range(args.answers)]  # mixed: every advantage non-zero
    config = AnalysisConfig()  # what a user gets: every default method, top-5 alternatives
    prompt_ids = encode_prompt(lm.tokenizer, prompt, chat_template=False)
    answer_ids = [list(lm.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers]
    ids = torch.tensor([prompt_ids + a for a in answer_ids], device=lm.device)  # (G, P + T)
    body = lm.model.get_decoder() if hasattr(lm.model, "get_decoder") else lm.model.model
    sampling = SamplingConfig(args.answers, 1.0, max_new_tokens=args.tokens, seed=args.seed)

    def full_logits() -> torch.Size:
        with torch.no_grad():
            return lm.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.shape

    def body_only() -> torch.Size:
        with torch.no_grad():
            return body(input_ids=ids, attention_mask=torch.ones_like(ids))[0].shape

    def bare_generate() -> list[list[int]]:
        inputs = torch.tensor([prompt_ids] * args.answers, device=lm.device)
        torch.manual_seed(args.seed)
        with torch.no_grad():
            out = lm.model.generate(
                inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=args.tokens,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                pad_token_id=lm.tokenizer.pad_token_id,
                use_cache=True,
            )
        return [row.tolist() for row in out[:, len(prompt_ids) :]]

    ops: dict[str, Callable[[], Any]] = {
        "given_analysis": lambda: analyze(
            lm, [GroupInput(prompt, answers=answers, rewards=rewards)], config
        ),
        "full_logit_forward": full_logits,
        "body_forward": body_only,
    }
    if not args.no_sampled:
        ops["sampled_analysis"] = lambda: analyze(
            lm, [GroupInput(prompt, sampling=sampling, rewards=rewards)], config
        )
        ops["bare_generate"] = bare_generate
    return ops, answer_ids


def _answer_ids(result: Any) -> list[list[int]]:
    return [[t.id for t in a.tokens] for _, a in result.iter_answers()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    lm = build_model(args)
    lm.model.generation_config.min_new_tokens = args.tokens  # every answer full length
    build_s = time.perf_counter() - start
    ops, given_ids = contenders(lm, args)
    times: dict[str, list[float]] = {k: [] for k in ops}
    cpu: dict[str, list[float]] = {k: [] for k in ops}
    peaks: dict[str, int] = dict.fromkeys(ops, 0)
    outputs: dict[str, Any] = {}
    for r in range(max(args.repeats, 1)):
        names = [n for n in ops if n not in SAMPLED or r < args.sampled_repeats]
        names = names[r % len(names) :] + names[: r % len(names)]  # rotate the order
        for name in names:
            seconds, cpu_s, peak, outputs[name] = measure(ops[name], args.device)
            times[name].append(seconds)
            cpu[name].append(cpu_s)
            peaks[name] = max(peaks[name], peak)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios, cpu_ratios = per_repeat_ratios(times), per_repeat_ratios(cpu)
    tokens = args.answers * args.tokens
    report: dict[str, Any] = {
        "benchmark": "real_size",
        "model": lm.name,
        "parameters": lm.num_parameters,
        "config": {
            k: getattr(lm.model.config, k)
            for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")
        },
        "answers": args.answers,
        "tokens_per_answer": args.tokens,
        "prompt_tokens": args.prompt_tokens,
        "device": args.device,
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "sampled_repeats": 0 if args.no_sampled else min(args.sampled_repeats, args.repeats),
        "build_s": build_s,
        "median_s": med,
        "times_s": times,
        "cpu_median_s": {k: statistics.median(v) for k, v in cpu.items()},
        "cpu_s": cpu,
        "peak_extra_mib": {k: v / 2**20 for k, v in peaks.items()},
        "answer_tokens_per_s": {k: tokens / v for k, v in med.items() if v > 0},
        # median of the per-repeat ratios (interleaved runs), and their range
        "ratios": {k: v["median"] for k, v in ratios.items()},
        "ratio_spread": ratios,
        "cpu_ratios": {k: v["median"] for k, v in cpu_ratios.items()},
        "cpu_ratio_spread": cpu_ratios,
        "given_tokens_ok": _answer_ids(outputs["given_analysis"]) == given_ids,
        "total_s": 0.0,
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
    }
    if not args.no_sampled:
        report["same_tokens_as_generate"] = (
            _answer_ids(outputs["sampled_analysis"]) == outputs["bare_generate"]
        )
    report["targets_met"] = {
        "given_le_1": report["ratios"]["given_vs_full_logit_forward"] <= TARGET_GIVEN,
        **(
            {}
            if args.no_sampled
            else {"sampled_le_1_2": report["ratios"]["sampled_vs_bare_generate"] <= TARGET_SAMPLED}
        ),
    }
    report["total_s"] = time.perf_counter() - start
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rep = run(args)
    if args.json:
        print(json.dumps(rep))
        return 0
    m = rep["median_s"]
    print(
        f"{rep['model']} ({rep['parameters'] / 1e6:.0f}M parameters), {args.answers} answers x "
        f"{args.tokens} tokens, {args.device} {args.dtype}, {rep['threads']} thread(s), "
        f"median of {args.repeats} ({rep['sampled_repeats']} sampled), "
        f"load {rep['load_average_1m']}"
    )
    for name, seconds in m.items():
        print(
            f"  {name:20s} {seconds:9.2f} s  {rep['answer_tokens_per_s'][name]:9.0f} tok/s  "
            f"peak +{rep['peak_extra_mib'][name]:8.0f} MiB"
        )
    for k, v in rep["ratio_spread"].items():
        print(
            f"  {k}: {v['median']:.2f} [{v['min']:.2f}-{v['max']:.2f}] wall, "
            f"{rep['cpu_ratios'][k]:.2f} CPU"
        )
    print("  targets:", json.dumps(rep["targets_met"]), f"total {rep['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
