"""Benchmark: chunked token statistics vs one logsumexp pass (time) and a naive version (memory).

Logits of shape (batch, seq, vocab), random normal, default (8, 512, 151936) (Qwen's vocabulary).
Variants, each run in a fresh subprocess so that its peak memory is its own:

    logsumexp     one ``torch.logsumexp`` pass over the logits (the time reference)
    chunked       ``gmts_core.metrics.token_stats`` (logprob, entropy, grad_norm), no top-k
    chunked_topk  the same with the top-k alternatives (what ``analyze`` computes)
    naive         full float32 ``log_softmax`` + ``softmax``, then the same statistics
                  (the memory reference)

Peak extra memory = peak memory while the variant runs minus the memory held right after the
logits were created. On CPU it is the process's peak resident set size (the kernel's VmHWM,
reset through /proc/self/clear_refs where allowed, else ``ru_maxrss``); on CUDA it is
``torch.cuda.max_memory_allocated``. Times are the best of ``--repeats`` runs.

    python benchmarks/token_stats.py                       # full size, CPU, float32
    python benchmarks/token_stats.py --dtype bfloat16 --json
    python benchmarks/token_stats.py --batch 2 --seq 64 --vocab 32000   # a quick run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS = ("logsumexp", "chunked", "chunked_topk", "naive")
_REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=5, help="alternatives for chunked_topk")
    p.add_argument("--chunk-size", type=int, default=None, help="default: the library's")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- the worker: one variant in this process --------------------------------------------------


def _rss_reset() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return _peak_rss_bytes()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _make_inputs(args: argparse.Namespace) -> tuple[Any, Any]:
    """Random logits (B, T, V) filled in place row block by row block, and targets (B, T)."""
    import torch

    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    logits = torch.empty(args.batch, args.seq, args.vocab, dtype=dtype, device=args.device)
    for row in logits.view(-1, args.vocab).split(256):  # no full-size temporary
        row.normal_(generator=gen)
    targets = torch.randint(
        0, args.vocab, (args.batch, args.seq), generator=gen, device=args.device
    )
    return logits, targets


def naive_stats(logits: Any, targets: Any, temperature: float) -> dict[str, Any]:
    """The straightforward version: full float32 log_softmax and softmax over every position."""
    import torch

    z = logits.float() / temperature if temperature != 1.0 else logits.float()  # (B, T, V)
    logp = torch.log_softmax(z, dim=-1)  # (B, T, V) float32
    p = torch.softmax(z, dim=-1)  # (B, T, V) float32
    logprob = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -torch.einsum("btv,btv->bt", p, logp)
    sum_sq = torch.einsum("btv,btv->bt", p, p)
    grad_norm = (1 - 2 * logprob.exp() + sum_sq).clamp_min(0).sqrt() / temperature
    return {"logprob": logprob, "entropy": entropy, "grad_norm": grad_norm}


def _run_variant(name: str, logits: Any, targets: Any, args: argparse.Namespace) -> Any:
    import torch

    from gmts_core.metrics import DEFAULT_CHUNK_SIZE, token_stats

    chunk = args.chunk_size or DEFAULT_CHUNK_SIZE
    if name == "logsumexp":
        return {"logsumexp": torch.logsumexp(logits, dim=-1)}
    if name == "naive":
        return naive_stats(logits, targets, args.temperature)
    top_k = args.top_k if name == "chunked_topk" else 0
    s = token_stats(logits, targets, args.temperature, top_k=top_k, chunk_size=chunk)
    return {"logprob": s.logprob, "entropy": s.entropy, "grad_norm": s.grad_norm}


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Time one variant and measure its peak extra memory; returns the figures."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    logits, targets = _make_inputs(args)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    # warm up on a sliver, so one-time costs (kernel libraries paged in) are not counted
    _run_variant(args.worker, logits[:1, :2], targets[:1, :2], args)
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        reset = _rss_reset()
        base = _current_rss_bytes() if reset else _peak_rss_bytes()
    times, cpu_times, out = [], [], {}
    for _ in range(args.repeats):
        out = {}  # free the previous outputs first
        cpu0, start = _cpu_seconds(), time.perf_counter()
        out = _run_variant(args.worker, logits, targets, args)
        sync()
        times.append(time.perf_counter() - start)
        cpu_times.append(_cpu_seconds() - cpu0)
    peak = torch.cuda.max_memory_allocated() if cuda else _peak_rss_bytes()
    return {
        "variant": args.worker,
        "time_s": min(times),
        "times_s": times,
        "cpu_s": min(cpu_times),  # process CPU time (all threads): steadier on a busy machine
        "peak_extra_bytes": max(peak - base, 0),
        "logits_bytes": logits.numel() * logits.element_size(),
        "means": {k: float(v.double().mean()) for k, v in out.items()},
        "threads": torch.get_num_threads(),
    }


# --- the driver: every variant in its own subprocess ------------------------------------------


def _spawn(variant: str, argv: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{_REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", variant]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Side-by-side figures, ratios against the references and whether the targets hold."""
    import torch

    from gmts_core.metrics import DEFAULT_CHUNK_SIZE

    t = {k: v["time_s"] for k, v in results.items()}
    cpu = {k: v["cpu_s"] for k, v in results.items()}
    mem = {k: v["peak_extra_bytes"] for k, v in results.items()}
    ratios = {
        "time_chunked_vs_logsumexp": _ratio(t.get("chunked"), t.get("logsumexp")),
        "time_chunked_topk_vs_logsumexp": _ratio(t.get("chunked_topk"), t.get("logsumexp")),
        "cpu_chunked_vs_logsumexp": _ratio(cpu.get("chunked"), cpu.get("logsumexp")),
        "cpu_chunked_topk_vs_logsumexp": _ratio(cpu.get("chunked_topk"), cpu.get("logsumexp")),
        "mem_chunked_vs_naive": _ratio(mem.get("chunked"), mem.get("naive")),
        "mem_chunked_topk_vs_naive": _ratio(mem.get("chunked_topk"), mem.get("naive")),
    }
    agree = None
    if "chunked" in results and "naive" in results:
        a, b = results["chunked"]["means"], results["naive"]["means"]
        agree = {k: abs(a[k] - b[k]) for k in a}
    return {
        "shape": [args.batch, args.seq, args.vocab],
        "dtype": args.dtype,
        "device": args.device,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "chunk_size": args.chunk_size or DEFAULT_CHUNK_SIZE,
        "repeats": args.repeats,
        "threads": next(iter(results.values()))["threads"] if results else None,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "variants": results,
        "ratios": ratios,
        "targets_met": {
            "time_ratio_le_2": (ratios["time_chunked_vs_logsumexp"] or 99) <= 2.0,
            "time_ratio_topk_le_2": (ratios["time_chunked_topk_vs_logsumexp"] or 99) <= 2.0,
            "mem_ratio_le_quarter": (ratios["mem_chunked_vs_naive"] or 99) <= 0.25,
        },
        "mean_abs_diff_chunked_vs_naive": agree,
    }


def print_table(report: dict[str, Any]) -> None:
    res = report["variants"]
    lse, naive = res.get("logsumexp", {}), res.get("naive", {})
    print(
        f"logits {tuple(report['shape'])} {report['dtype']} on {report['device']} "
        f"(torch {report['torch']}, {report['threads']} threads, chunk {report['chunk_size']}, "
        f"tau {report['temperature']}, best of {report['repeats']})"
    )
    nan = float("nan")
    print(
        f"{'variant':14s} {'time s':>9s} {'x logsumexp':>12s} {'cpu s':>9s} {'x logsumexp':>12s}"
        f" {'peak extra MiB':>15s} {'x naive':>8s}"
    )
    for name, r in res.items():
        tr = _ratio(r["time_s"], lse.get("time_s"))
        cr = _ratio(r["cpu_s"], lse.get("cpu_s"))
        mr = _ratio(r["peak_extra_bytes"], naive.get("peak_extra_bytes"))
        print(
            f"{name:14s} {r['time_s']:9.3f} {tr if tr is not None else nan:12.2f} "
            f"{r['cpu_s']:9.3f} {cr if cr is not None else nan:12.2f} "
            f"{r['peak_extra_bytes'] / 2**20:15.1f} {mr if mr is not None else nan:8.3f}"
        )
    print("targets:", json.dumps(report["targets_met"]))
    if report["mean_abs_diff_chunked_vs_naive"]:
        print("chunked vs naive, |difference of means|:", report["mean_abs_diff_chunked_vs_naive"])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return
    raw = list(sys.argv[1:] if argv is None else argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; valid: {', '.join(VARIANTS)}")
    results = {v: _spawn(v, raw) for v in variants}
    report = summarize(results, args)
    if args.json:
        print(json.dumps(report))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
