"""Which models the KV-cached sampler serves: a probe on first use, its verdict kept per model
and path (dtype, device, native kernels on or off).

The sampler's logits, through prefill, repeated rows, decoding and dropped rows, must equal the
teacher-forced logits of the model's own body and head within the load-time tolerance of
:mod:`gmts_core.model.logit_head` (and, for a Llama-layout model, so must the fused step's).
Models that fail, and generation configs that ask for processors the sampler does not apply,
are sampled by ``generate``; the log says which and why once per model and reason."""

from __future__ import annotations

import logging
import math
import threading
import weakref
from typing import Any

import torch

from gmts_core import native
from gmts_core.model.kv_cache import (
    keep_rows,
    repeat_rows,
    sampling_cache,
)
from gmts_core.model.logit_head import (
    PROBE_TOLERANCE,
    PROBE_TOLERANCE_LOW_PRECISION,
    HeadPath,
    head_path,
)
from gmts_core.model.rope_window import rope_window
from gmts_core.sampling.fused_decode import FusedStep
from gmts_core.sampling.kv_sampler import DecodeBody, prefill, unsupported_settings

logger = logging.getLogger(__name__)

PROBE_PROMPT = 8  # tokens of each probe prompt


def probe_difference(model: Any) -> tuple[float, float]:
    """(max |sampler logits - teacher-forced logits|, max |logits|) on a probe that goes through
    every path of :func:`decode`: two prompts prefilled together, their rows repeated (x2),
    one decoding step, a row dropped, one more step, with the model's own body and (for a
    Llama-layout model) with the fused step; the teacher-forced logits are those of one forward
    of the body over each full sequence (what the analysis scores)."""
    path = head_path(model)
    ways = [False] + ([True] if FusedStep.of(path.body) is not None else [])
    results = [_probe(model.config, path, DecodeBody(path, fused)) for fused in ways]
    return max(d for d, _ in results), results[0][1]


def _probe_mixed_lengths(config: Any, path: HeadPath) -> tuple[float, float]:
    """The fused step's logits for two prompts of different lengths sampled in one call
    (:func:`gmts_core.sampling.kv_sampler.prefill`: right-aligned in the cache, each row from
    its own first slot), through repeated rows, a step, a dropped row and another step, against
    one forward of the body over each unpadded sequence."""
    device = next(path.body.parameters()).device
    vocab = int(path.head.weight.shape[0])
    short = PROBE_PROMPT - 3
    prompts = [
        [(7 + 13 * i) % vocab for i in range(PROBE_PROMPT)],
        [(11 + 5 * i) % vocab for i in range(short)],
    ]
    first = torch.tensor([(3 + 17 * r) % vocab for r in range(4)], device=device)  # (4,)
    second = torch.tensor([(5 + 29 * r) % vocab for r in range(4)], device=device)
    body = DecodeBody(path, fused=True)
    with torch.no_grad():
        cache = sampling_cache(config, PROBE_PROMPT + 2)
        hidden, _, starts = prefill(body, prompts, 2, cache, 2)  # rows a, a, b, b
        assert starts is not None
        ours = [body.logits(hidden), body.logits(body.step(first, cache, starts))]
        kept = torch.tensor([1, 2, 3], device=device)
        keep_rows(cache, kept)
        last = body.logits(body.step(second[kept], cache, starts[kept]))  # (3, V)
        diffs, size = [], 0.0
        for row in range(4):
            seq = torch.tensor(prompts[row // 2], device=device)
            seq = torch.cat([seq, first[row : row + 1], second[row : row + 1]])[None]
            hidden_row = path.body(input_ids=seq, attention_mask=torch.ones_like(seq))[0]
            forced = path.logits(hidden_row[0, -3:]).float()  # (3, V)
            size = max(size, float(forced.abs().amax()))
            diffs += [(ours[t][row] - forced[t]).abs().amax() for t in (0, 1)]
            if row in kept.tolist():
                diffs.append((last[row - 1] - forced[2]).abs().amax())
    diff = max(float(d) for d in diffs)
    return (diff if math.isfinite(diff) else float("inf")), size


def serves_mixed_lengths(model: Any) -> bool:
    """True when one sampling call may take prompts of different lengths
    (:func:`gmts_core.sampling.kv_sampler.prefill`): the sampler serves the model
    (:func:`unserved_reason`) with the fused step, whose mixed-length probe passes
    (:func:`_probe_mixed_lengths`, its own verdict: failing it costs only the mixing), its
    rotary frequencies do not switch with the length (no window:
    :mod:`gmts_core.model.rope_window`), and its generation config sets no ``min_length`` (which
    counts the prompt, so would see the right-aligned padding)."""
    if rope_window(model.config) is not None or getattr(
        model.generation_config, "min_length", None
    ):
        return False
    if unserved_reason(model) is not None or not FusedStep.serves(head_path(model).body):
        return False
    return _mixed_reason(model) is None


# A verdict holds for the code that was probed: the model's parameters' dtype and device, and
# whether the native kernels take the fused step (GMTS_NATIVE, read on every call). A model
# moved, cast or run with the kernels switched is probed again.
PathKey = tuple[torch.dtype, str, bool]


def _path_key(model: Any) -> PathKey:
    weight = next(iter(getattr(model, "parameters", list)()), None)
    if weight is None:  # no parameters: the probe itself fails and says why
        return torch.float32, "none", native.enabled()
    return weight.dtype, weight.device.type, native.enabled()


_MIXED: weakref.WeakKeyDictionary[Any, dict[PathKey, str | None]] = weakref.WeakKeyDictionary()


def _mixed_reason(model: Any) -> str | None:
    """None if the fused step's mixed-length probe (:func:`_probe_mixed_lengths`) passes within
    the sampler's tolerance, else why not (said in the log once per model). Its verdict is kept
    apart from the sampler's: a model that fails it is still sampled by the KV-cached sampler,
    one prompt length per call (a float64 model whose attention takes its softmax in float32
    fails it by rounding: the masked slots shift the softmax's summation order)."""
    key = _path_key(model)
    with _LOCK:
        if key in _MIXED.get(model, {}):
            return _MIXED[model][key]
    try:
        diff, size = _probe_mixed_lengths(model.config, head_path(model))
    except Exception as exc:  # noqa: BLE001 - any failure of the model's own layers: not mixed
        reason: str | None = f"the probe fails ({type(exc).__name__}: {str(exc)[:120]})"
    else:
        dtype = next(model.parameters()).dtype
        tol = PROBE_TOLERANCE.get(dtype, PROBE_TOLERANCE_LOW_PRECISION)
        reason = None
        if not diff <= tol * (1.0 + size):
            reason = f"its mixed-length logits differ from its forward's by {diff:.3g}"
    with _LOCK:
        _MIXED.setdefault(model, {})[key] = reason
    if reason is not None:
        logger.info(
            "%s: prompts of different lengths are sampled in separate calls: %s",
            type(model).__name__,
            reason,
        )
    return reason


def _probe(config: Any, path: HeadPath, body: DecodeBody) -> tuple[float, float]:
    device = next(path.body.parameters()).device
    vocab = int(path.head.weight.shape[0])
    prompts = torch.tensor(
        [
            [(7 + 13 * i) % vocab for i in range(PROBE_PROMPT)],
            [(11 + 5 * i) % vocab for i in range(PROBE_PROMPT)],
        ],
        device=device,
    )  # (2, P)
    first = torch.tensor([(3 + 17 * r) % vocab for r in range(4)], device=device)  # (4,)
    second = torch.tensor([(5 + 29 * r) % vocab for r in range(4)], device=device)
    with torch.no_grad():
        cache = sampling_cache(config, PROBE_PROMPT + 2)
        logits = [body.logits(body.last_hidden(prompts, cache)).repeat_interleave(2, 0)]
        repeat_rows(cache, 2)  # rows a, a, b, b
        logits.append(body.logits(body.step(first, cache)))
        kept = torch.tensor([1, 2, 3], device=device)
        keep_rows(cache, kept)
        last = body.logits(body.step(second[kept], cache))  # (3, V)
        ours = torch.stack(logits, 1)  # (4, 2, V)
        seqs = torch.cat([prompts.repeat_interleave(2, 0), first[:, None], second[:, None]], 1)
        mask = torch.ones_like(seqs)
        hidden = path.body(input_ids=seqs, attention_mask=mask, use_cache=False)[0]  # (4, P+2, D)
        forced = path.logits(hidden[:, PROBE_PROMPT - 1 :]).float()  # (4, 3, V)
    diffs = [(ours - forced[:, :2]).abs().amax(), (last - forced[kept, 2]).abs().amax()]
    size = float(forced.abs().amax())
    diff = max(float(d) for d in diffs)
    return (diff if math.isfinite(diff) else float("inf")), size


_PROBED: weakref.WeakKeyDictionary[Any, dict[PathKey, str | None]] = weakref.WeakKeyDictionary()

_LOGGED: weakref.WeakKeyDictionary[Any, set[str | None]] = weakref.WeakKeyDictionary()

_LOCK = threading.Lock()


def _probe_verdict(model: Any) -> str | None:
    if getattr(model, "training", False):
        return "it is in training mode (dropout would make the probe random)"
    try:
        diff, size = probe_difference(model)
    except Exception as exc:  # noqa: BLE001 - any failure of the model's own layers: not served
        return f"the probe fails ({type(exc).__name__}: {str(exc)[:120]})"
    dtype = next(model.parameters()).dtype
    tol = PROBE_TOLERANCE.get(dtype, PROBE_TOLERANCE_LOW_PRECISION)
    if not diff <= tol * (1.0 + size):
        return f"its cached logits differ from its forward's by {diff:.3g} (size {size:.3g})"
    return None


def unserved_reason(model: Any) -> str | None:
    """None if :func:`decode` serves this model, else why not; said in the log once per model
    and reason.

    The probe's verdict is kept per model object and path (:func:`_path_key`); the generation
    settings are checked on every call, as a caller may change the generation config between
    calls.
    """
    settings = unsupported_settings(model.generation_config)
    key = _path_key(model)
    with _LOCK:
        verdicts = _PROBED.get(model, {})
        probed = key in verdicts
        reason = verdicts.get(key)
    if not settings and not probed:
        reason = _probe_verdict(model)
        with _LOCK:
            _PROBED.setdefault(model, {})[key] = reason
    if settings:
        reason = f"its generation config sets {', '.join(settings)}"
    with _LOCK:
        logged = _LOGGED.setdefault(model, set())
        first = reason not in logged
        logged.add(reason)
    if first:
        name = type(model).__name__
        if reason is None:
            logger.info("%s: sampled by the KV-cached sampler (probe passed)", name)
        else:
            logger.warning(
                "%s: sampled with generate(): the KV-cached sampler cannot serve it, %s",
                name,
                reason,
            )
    return reason
