"""Benchmark: chunked token statistics vs a logsumexp pass (time) and a naive version (memory).

Logits of shape (batch, seq, vocab), random normal, default (8, 512, 151936) (Qwen's vocabulary).

Time. In one process per thread count, with the logits created once, these run interleaved
(each repeat runs every variant once, in an order rotated from repeat to repeat, so that all see
the same machine load), ``--repeats`` times (default 5):

    logsumexp     ``torch.logsumexp`` over the same chunks of ``chunk_size`` positions that the
                  statistics use, in the logits' dtype: one exp pass per chunk, like the
                  statistics (the time reference; a whole-tensor ``logsumexp`` allocates a
                  full-size temporary and its time swings with the allocator and the load)
    chunked       ``gmts_core.stats.metrics.token_stats`` (logprob, entropy, grad_norm), no top-k
    chunked_topk  the same with the top-k alternatives (what ``analyze`` computes)

Each repeat gives a ratio chunked / logsumexp of two runs seconds apart; the report gives the
median and the range (min-max) of the times and of those ratios. ``--threads 1,2`` measures
each thread count in turn; the targets read the last one.

Memory. Each variant runs once more in a fresh subprocess, so that its peak is its own, with

    naive         full float32 ``log_softmax`` + ``softmax``, then the same statistics
                  (the memory reference)

Peak extra memory = peak memory while the variant runs minus the memory held right after the
logits were created. On CPU it is the process's peak resident set size (the kernel's VmHWM,
reset through /proc/self/clear_refs where allowed, else ``ru_maxrss``); on CUDA it is
``torch.cuda.max_memory_allocated``.

    python benchmarks/token_stats.py                       # full size, CPU, float32
    python benchmarks/token_stats.py --dtype bfloat16 --threads 1,2 --json
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
TIMED = ("logsumexp", "chunked", "chunked_topk")  # naive is the memory reference only
TARGET_TIME_RATIO = 2.0
TARGET_TOPK_TIME_RATIO = 1.2  # statistics with top-5 alternatives (one block-maxima pass)
TARGET_MEM_RATIO = 0.25
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
    p.add_argument("--repeats", type=int, default=5, help="interleaved timing repeats")
    p.add_argument(
        "--threads", default=None, help="torch CPU threads, or a list: 1,2 (default: torch's)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--time-worker", type=int, default=None, help=argparse.SUPPRESS)
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


def chunked_logsumexp(logits: Any, chunk: int) -> Any:
    """``torch.logsumexp`` over chunks of ``chunk`` positions, in the logits' dtype: the time
    reference, chunked exactly as the statistics are (one exp pass per chunk)."""
    import torch

    flat = logits.reshape(-1, logits.shape[-1])  # (N, V) a view
    out = torch.empty(flat.shape[0], dtype=flat.dtype, device=flat.device)
    for start in range(0, flat.shape[0], chunk):
        torch.logsumexp(flat[start : start + chunk], dim=-1, out=out[start : start + chunk])
    return out


def _run_variant(name: str, logits: Any, targets: Any, args: argparse.Namespace) -> Any:
    from gmts_core.stats.metrics import DEFAULT_CHUNK_SIZE, token_stats

    chunk = args.chunk_size or DEFAULT_CHUNK_SIZE
    if name == "logsumexp":
        return {"logsumexp": chunked_logsumexp(logits, chunk)}
    if name == "naive":
        return naive_stats(logits, targets, args.temperature)
    top_k = args.top_k if name == "chunked_topk" else 0
    s = token_stats(logits, targets, args.temperature, top_k=top_k, chunk_size=chunk)
    return {"logprob": s.logprob, "entropy": s.entropy, "grad_norm": s.grad_norm}


def _sync(args: argparse.Namespace) -> None:
    import torch

    if args.device == "cuda":
        torch.cuda.synchronize()


def memory_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Run one variant once and measure its peak extra memory; returns the figures."""
    import torch

    cuda = args.device == "cuda"
    logits, targets = _make_inputs(args)
    # warm up on a sliver, so one-time costs (kernel libraries paged in) are not counted
    _run_variant(args.worker, logits[:1, :2], targets[:1, :2], args)
    _sync(args)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        reset = _rss_reset()
        base = _current_rss_bytes() if reset else _peak_rss_bytes()
    out = _run_variant(args.worker, logits, targets, args)
    _sync(args)
    peak = torch.cuda.max_memory_allocated() if cuda else _peak_rss_bytes()
    return {
        "variant": args.worker,
        "peak_extra_bytes": max(peak - base, 0),
        "logits_bytes": logits.numel() * logits.element_size(),
        "means": {k: float(v.double().mean()) for k, v in out.items()},
    }


def _spread(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    mid = len(ordered) // 2
    med = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": med, "min": ordered[0], "max": ordered[-1], "values": values}


def time_worker(args: argparse.Namespace, variants: list[str]) -> dict[str, Any]:
    """Interleaved timing of ``variants`` on one set of logits with ``--time-worker`` threads."""
    import torch

    if args.device == "cpu":
        torch.set_num_threads(args.time_worker)
    logits, targets = _make_inputs(args)
    for name in variants:  # warm-up: kernel libraries paged in, work buffers' first faults
        _run_variant(name, logits[:1, :2], targets[:1, :2], args)
    wall: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.repeats):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for name in order:
            _sync(args)
            cpu0, start = _cpu_seconds(), time.perf_counter()
            out = _run_variant(name, logits, targets, args)
            _sync(args)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(_cpu_seconds() - cpu0)
            del out
    report: dict[str, Any] = {
        "threads": torch.get_num_threads(),
        "wall_s": {v: _spread(t) for v, t in wall.items()},
        "cpu_s": {v: _spread(t) for v, t in cpu.items()},  # process CPU time, all threads
        "ratio": {},
        "cpu_ratio": {},
    }
    if "logsumexp" in variants:
        for v in variants:
            if v != "logsumexp":
                pairs = zip(wall[v], wall["logsumexp"], strict=True)
                report["ratio"][v] = _spread([a / b for a, b in pairs])
                pairs = zip(cpu[v], cpu["logsumexp"], strict=True)
                report["cpu_ratio"][v] = _spread([a / b for a, b in pairs])
    return report


# --- the driver: timing and memory workers in their own subprocesses --------------------------


def _spawn(argv: list[str], *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{_REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {extra} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _thread_counts(args: argparse.Namespace) -> list[int]:
    import torch

    if args.device == "cuda":
        return [torch.get_num_threads()]
    if not args.threads:
        return [torch.get_num_threads()]
    return [int(t) for t in str(args.threads).split(",") if t]


def summarize(
    timing: dict[str, dict[str, Any]], memory: dict[str, dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    """Side-by-side figures, ratios against the references and whether the targets hold."""
    import torch

    from gmts_core.stats.metrics import DEFAULT_CHUNK_SIZE

    main = timing[list(timing)[-1]] if timing else {"ratio": {}, "cpu_ratio": {}}
    mem = {k: v["peak_extra_bytes"] for k, v in memory.items()}
    med = lambda d, k: d[k]["median"] if k in d else None  # noqa: E731
    ratios = {
        "time_chunked_vs_logsumexp": med(main["ratio"], "chunked"),
        "time_chunked_topk_vs_logsumexp": med(main["ratio"], "chunked_topk"),
        "cpu_chunked_vs_logsumexp": med(main["cpu_ratio"], "chunked"),
        "cpu_chunked_topk_vs_logsumexp": med(main["cpu_ratio"], "chunked_topk"),
        "mem_chunked_vs_naive": _ratio(mem.get("chunked"), mem.get("naive")),
        "mem_chunked_topk_vs_naive": _ratio(mem.get("chunked_topk"), mem.get("naive")),
    }
    agree = None
    if "chunked" in memory and "naive" in memory:
        a, b = memory["chunked"]["means"], memory["naive"]["means"]
        agree = {k: abs(a[k] - b[k]) for k in a}
    big = 99.0
    return {
        "benchmark": "token_stats",
        "shape": [args.batch, args.seq, args.vocab],
        "dtype": args.dtype,
        "device": args.device,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "chunk_size": args.chunk_size or DEFAULT_CHUNK_SIZE,
        "repeats": args.repeats,
        "threads": [int(t) for t in timing],
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "timing": timing,
        "memory": memory,
        "ratios": ratios,
        "targets_met": {
            "time_ratio_le_2": (ratios["time_chunked_vs_logsumexp"] or big) <= TARGET_TIME_RATIO,
            "time_ratio_topk_le_2": (ratios["time_chunked_topk_vs_logsumexp"] or big)
            <= TARGET_TIME_RATIO,
            "time_ratio_topk_le_1_2": (ratios["time_chunked_topk_vs_logsumexp"] or big)
            <= TARGET_TOPK_TIME_RATIO,
            "mem_ratio_le_quarter": (ratios["mem_chunked_vs_naive"] or big) <= TARGET_MEM_RATIO,
        },
        "mean_abs_diff_chunked_vs_naive": agree,
    }


def print_table(report: dict[str, Any]) -> None:
    print(
        f"logits {tuple(report['shape'])} {report['dtype']} on {report['device']} "
        f"(torch {report['torch']}, chunk {report['chunk_size']}, tau {report['temperature']}, "
        f"{report['repeats']} interleaved repeats, load {report['load_average_1m']})"
    )
    for threads, t in report["timing"].items():
        print(f"{threads} thread(s): median [min-max]")
        for name, w in t["wall_s"].items():
            line = f"  {name:13s} {w['median']:8.3f} s [{w['min']:.3f}-{w['max']:.3f}]"
            if name in t["ratio"]:
                r, c = t["ratio"][name], t["cpu_ratio"][name]
                line += (
                    f"   x logsumexp {r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]"
                    f"   CPU time x {c['median']:.2f} [{c['min']:.2f}-{c['max']:.2f}]"
                )
            print(line)
    naive = report["memory"].get("naive", {}).get("peak_extra_bytes")
    for name, m in report["memory"].items():
        mr = _ratio(m["peak_extra_bytes"], naive)
        ratio = f"  x naive {mr:.3f}" if mr is not None else ""
        print(f"  peak extra memory {name:13s} {m['peak_extra_bytes'] / 2**20:10.1f} MiB{ratio}")
    print("targets:", json.dumps(report["targets_met"]))
    if report["mean_abs_diff_chunked_vs_naive"]:
        print("chunked vs naive, |difference of means|:", report["mean_abs_diff_chunked_vs_naive"])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; valid: {', '.join(VARIANTS)}")
    if args.worker:
        print(json.dumps(memory_worker(args)))
        return
    if args.time_worker is not None:
        print(json.dumps(time_worker(args, [v for v in variants if v in TIMED])))
        return
    raw = list(sys.argv[1:] if argv is None else argv)
    timing = {}
    if any(v in TIMED for v in variants):
        timing = {str(n): _spawn(raw, "--time-worker", str(n)) for n in _thread_counts(args)}
    memory = {} if args.no_memory else {v: _spawn(raw, "--worker", v) for v in variants}
    report = summarize(timing, memory, args)
    if args.json:
        print(json.dumps(report))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
