"""Benchmark: a decoding step's matrix products, the native kernel against torch's.

A decoding step multiplies each weight matrix of the model by as many rows as the batch has
answers. This times, for one step's shapes of a Llama-layout model (default: ``smollm2-135m``'s,
30 layers of query/key/value 832 x 576, output 576 x 576, gate/up 3072 x 576, down 576 x 1536,
and the LM head 49152 x 576; random float32 weights, 529 MB), the products of every matrix by
``--rows`` rows: ``gmts_linear_rows`` (:meth:`gmts_core.native.DecodeKernels.linear`) against
``torch.nn.functional.linear``, alternately, the best of ``--repeats`` in wall seconds, in this
process's torch threads. The two agree to float32 rounding (checked on the first matrices).

    .venv/bin/python benchmarks/decode_products.py [--rows 1 8 16 32] [--threads 1] [--json]

The OpenMP runtime reads ``OMP_WAIT_POLICY`` when torch loads it: run with
``OMP_WAIT_POLICY=PASSIVE`` to time the products as ``gmts`` commands run them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch
from _common import emit, machine

from gmts_core import native

SMOLLM2_SHAPES = ((832, 576), (576, 576), (3072, 576), (576, 1536))
SMOLLM2_LAYERS = 30
SMOLLM2_HEAD = (49152, 576)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 16, 32])
    p.add_argument("--layers", type=int, default=SMOLLM2_LAYERS, help="decoder layers")
    p.add_argument("--threads", type=int, default=1, help="torch threads (both)")
    p.add_argument("--repeats", type=int, default=5, help="timed passes of each (best)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def step_weights(layers: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    shapes = [s for _ in range(layers) for s in SMOLLM2_SHAPES] + [SMOLLM2_HEAD]
    return [torch.randn(*shape, generator=gen) * 0.02 for shape in shapes]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    kernels = native.decode_kernels()
    if kernels is None or not kernels.linear_rows:
        raise SystemExit("the native matrix product is not available here (no compiler or AVX2)")
    weights = step_weights(args.layers)
    megabytes = sum(w.numel() for w in weights) * 4 / 1e6
    rows_out = []
    for m in args.rows:
        inputs = {k: torch.randn(m, k) for k in {w.shape[1] for w in weights}}
        for w in weights[:4] + weights[-1:]:  # both give the same products
            torch.testing.assert_close(
                kernels.linear(inputs[w.shape[1]], w),
                torch.nn.functional.linear(inputs[w.shape[1]], w),
                rtol=1e-4,
                atol=1e-5,
            )
        best = {"native": float("inf"), "torch": float("inf")}
        for _ in range(args.repeats):
            for name in best:
                start = time.perf_counter()
                for w in weights:
                    x = inputs[w.shape[1]]
                    if name == "native":
                        kernels.linear(x, w)
                    else:
                        torch.nn.functional.linear(x, w)
                best[name] = min(best[name], time.perf_counter() - start)
        rows_out.append(
            {
                "rows": m,
                "native_ms": round(best["native"] * 1e3, 1),
                "torch_ms": round(best["torch"] * 1e3, 1),
                "speedup": round(best["torch"] / best["native"], 2),
                "native_gb_per_s": round(megabytes / 1e3 / best["native"], 2),
            }
        )
    return {
        "benchmark": "decode_products",
        "weights_mb": round(megabytes, 1),
        "layers": args.layers,
        "threads": args.threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "results": rows_out,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = measure(args)
    lines = [
        f"one decoding step's products ({result['weights_mb']:.0f} MB of float32 weights), "
        f"{result['threads']} thread(s), best of {args.repeats}:"
    ]
    lines += [
        f"  {r['rows']:3d} rows: native {r['native_ms']:7.1f} ms  torch {r['torch_ms']:7.1f} ms"
        f"  x{r['speedup']:.2f}"
        for r in result["results"]
    ]
    lines.append(f"  load average {result['machine'].get('load_average_1m')}")
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
