"""Benchmark: end-to-end ``POST /v1/analyze`` vs a bare ``model.generate`` of the same answers.

The analysis samples ``--num-samples`` answers of exactly ``--max-new-tokens`` tokens each
(default 8 x 64) on the bundled ``tiny-arith`` model, then computes every per-token statistic,
every selection method and the summaries, and serializes the JSON body. The reference is one
bare batched ``model.generate`` call with the same prompt, seed and sampling settings, i.e. the
cheapest way to merely *produce* those answers. Both are forced to the full length with
``min_new_tokens`` (set on the model's generation config, which both paths use), so neither
stops early at the end-of-sequence token; the benchmark checks that both produce the same
token ids.

The request goes through the real app (``create_app``): by default over HTTP to a uvicorn
server on 127.0.0.1 (``--transport http``), or in-process through Starlette's TestClient
(``--transport asgi``). The two are timed alternately, ``--repeats`` times each after a
warm-up, and the medians are compared. Target: analyze / generate <= 1.5.

    .venv/bin/python benchmarks/analyze_vs_generate.py
    .venv/bin/python benchmarks/analyze_vs_generate.py --json --repeats 9
    .venv/bin/python benchmarks/analyze_vs_generate.py --num-samples 2 --max-new-tokens 8 \
        --repeats 1
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import resource
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import torch
from _common import LiveServer, emit, machine, median
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.main import create_app
from gmts_core.model.loading import LoadedModel
from gmts_core.stats.tokenization import encode_prompt

TARGET_RATIO = 1.5
PROMPT = "Q: 47+38=?\nA:"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="tiny-arith", help="alias or folder (default: demo)")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--num-samples", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7, help="timed runs of each (median)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (both paths)")
    p.add_argument("--transport", choices=("http", "asgi"), default="http")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    return p.parse_args(argv)


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The analyze request: sampling fields, a reward rule, every default selection method."""
    return {
        "model": args.model,
        "prompt": args.prompt,
        "num_samples": args.num_samples,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "seed": args.seed,
        "reward": {"kind": "numeric", "reference": "85"},
    }


def bare_generate(
    lm: LoadedModel, args: argparse.Namespace, chat_template: bool = False
) -> Callable[[], torch.Tensor]:
    """The reference: one batched, KV-cached ``generate`` with the analysis' settings (the
    prompt in the model's chat template where the analysis puts it there by default)."""
    prompt_ids = encode_prompt(lm.tokenizer, args.prompt, chat_template=chat_template)
    input_ids = torch.tensor([prompt_ids]).repeat(args.num_samples, 1)  # (G, P)

    def run() -> torch.Tensor:
        torch.manual_seed(args.seed)
        with torch.no_grad():
            out = lm.model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=args.max_new_tokens,
                min_new_tokens=args.max_new_tokens,
                do_sample=True,
                temperature=args.temperature,
                top_p=1.0,
                top_k=0,
                pad_token_id=lm.tokenizer.pad_token_id,
                use_cache=True,
            )
        return out[:, len(prompt_ids) :]  # (G, T)

    return run


@contextlib.contextmanager
def poster(app: Any, transport: str) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
    """``post(body) -> json`` for POST /v1/analyze over HTTP or in-process ASGI."""
    if transport == "http":
        with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=600) as http:
            yield lambda body: _checked(http.post("/v1/analyze", json=body))
    else:
        # the host a local client sends (the app answers only its allowed hosts)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield lambda body: _checked(client.post("/v1/analyze", json=body))


def _checked(response: httpx.Response) -> dict[str, Any]:
    if response.status_code != 200:
        raise RuntimeError(f"analyze failed: {response.status_code} {response.text[:500]}")
    return response.json()  # type: ignore[no-any-return]


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds and CPU seconds of this process (all threads: server, worker, client)."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    settings = Settings(
        ui_enabled=False,
        torch_threads=args.threads,
        max_new_tokens=max(args.max_new_tokens, 1),
        max_answers=max(args.num_samples, 1),
    )
    app = create_app(settings)
    models = app.state.services.models
    lm = models.get(args.model)
    # force full-length answers in both paths (generate reads this config on every call)
    lm.model.generation_config.min_new_tokens = args.max_new_tokens
    body = request_body(args)
    generate = bare_generate(lm, args, models.chat_template_default(args.model))
    times: dict[str, list[float]] = {"analyze": [], "generate": []}
    cpu: dict[str, list[float]] = {"analyze": [], "generate": []}
    with poster(app, args.transport) as post:
        result, ids = post(body), generate()  # warm-up (and the token check)
        for i in range(args.repeats):
            order = ("analyze", "generate") if i % 2 == 0 else ("generate", "analyze")
            for name in order:
                fn = (lambda: post(body)) if name == "analyze" else generate
                wall, used = _timed(fn)
                times[name].append(wall)
                cpu[name].append(used)
    api_ids = [[t["id"] for t in a["tokens"]] for a in result["answers"]]
    return report(args, times, cpu, api_ids, ids.tolist())


def report(
    args: argparse.Namespace,
    times: dict[str, list[float]],
    cpu: dict[str, list[float]],
    api_ids: list[list[int]],
    gen_ids: list[list[int]],
) -> dict[str, Any]:
    a, g = median(times["analyze"]), median(times["generate"])
    ratio = a / g if g else float("nan")
    ca, cg = median(cpu["analyze"]), median(cpu["generate"])
    return {
        "benchmark": "analyze_vs_generate",
        "model": args.model,
        "transport": args.transport,
        "num_samples": args.num_samples,
        "max_new_tokens": args.max_new_tokens,
        "tokens_per_answer": sorted({len(x) for x in api_ids}),
        "same_tokens_as_generate": api_ids == gen_ids,
        "repeats": args.repeats,
        "analyze_median_s": a,
        "generate_median_s": g,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": ratio <= TARGET_RATIO,
        # CPU time of the process: steadier than wall time on a machine shared with other jobs
        "analyze_cpu_median_s": ca,
        "generate_cpu_median_s": cg,
        "cpu_ratio": ca / cg if cg else float("nan"),
        "analyze_times_s": times["analyze"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "generate_times_s": times["generate"],
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rep = measure(args)
    m = rep["machine"]
    lines = [
        f"POST /v1/analyze ({args.transport}) vs bare generate: {args.num_samples} answers x "
        f"{args.max_new_tokens} tokens, {args.model}, median of {args.repeats}, "
        f"{m['torch_threads']} torch thread(s), load {m['load_average_1m']}",
        f"  analyze   {rep['analyze_median_s']:.3f} s",
        f"  generate  {rep['generate_median_s']:.3f} s",
        f"  ratio     {rep['ratio']:.2f} (target <= {TARGET_RATIO}: "
        f"{'met' if rep['target_met'] else 'MISSED'})",
        f"  CPU time: analyze {rep['analyze_cpu_median_s']:.3f} s, generate "
        f"{rep['generate_cpu_median_s']:.3f} s, ratio {rep['cpu_ratio']:.2f}",
        f"  same token ids in both paths: {rep['same_tokens_as_generate']}",
        f"  peak resident memory of the process: {rep['peak_rss_mb']:.0f} MB",
    ]
    emit(rep, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
