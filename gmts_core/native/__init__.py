"""CPU kernels in C for the loops that eager PyTorch cannot make cheap, each with a PyTorch path.

``kernels.c`` holds seven kernels (its header describes the loops); each wrapper here returns None
(or, for :func:`row_sums`, is not offered by :func:`row_sums_supported`) when the kernels are
off or the tensors are not in its layout, and the caller then uses PyTorch's ops:

- :func:`row_sums` (``gmts_row_sums``): per row of (C, V) float32 or bfloat16 logits, the top-k
  logits and ids (ties by lower id), the target's logit and the sums s, q, p of e = exp(u),
  e^2 and e u over the other tokens, u = (z - runner-up) / tau, accumulated in double; two
  reads of each logit and no writes (eager PyTorch needs a float32 copy and about seven
  passes). Used by the token statistics (:mod:`gmts_core.stats.metrics`, the sums of
  :mod:`gmts_core.stats.softmax_terms`: entropy, sum pi^2, g, the top alternatives), its rows
  split over ``torch.get_num_threads()`` threads.
- :func:`attend_one` (``gmts_attend_one``): softmax(q k^T) v for one query per head, q (N, g, d)
  over N entries' cached keys and values (N, T, d). Used by the sampler's fused decoding step
  (:mod:`gmts_core.sampling.fused_decode`, ``FusedStep._attention``) where the other kernels do not
  take the step: on CPU hundreds of (1 x d) @ (d x T) matmuls cost far more than their
  arithmetic.
- :func:`rms_norm` (``gmts_rms_norm``): weight * x / sqrt(mean(x^2) + eps) over (n, d) float32
  rows. Used by the fused decoding step for each layer's two norms and the final norm.
- :func:`silu_mul` (``gmts_silu_mul``): silu(gate) * up from the (n, 2 m) gate-and-up
  projection. Used by the fused decoding step for each layer's MLP gate.
- :func:`rotary_attend` (``gmts_rotary_attend``): one decoding step's attention from the
  (n, (H + 2 KV) Dh) projections: keys rotated (rotary embedding) and written with the values
  at slot ``pos`` of the key/value cache buffers, queries rotated and scaled, each over its
  row's slots of its key/value group (from slot 0, or from the row's own first slot when
  prompts of different lengths share the batch, right-aligned). Used by the fused decoding
  step for each layer's attention, its rows split over torch's threads (OpenMP, where the
  compiler has it).
- :func:`categorical` (``gmts_categorical``): one draw per row of float32 weights from
  exponential_'s uniforms, as ``torch.multinomial(p, 1)`` draws on CPU: a pass per row without
  logarithms bounds the largest ratio p / q from below (q <= u / (1 - u)), and q's logarithm is
  formed only for the few weights whose ratio can reach it (q >= u); the rows it cannot decide
  exactly are flagged for a libm redraw. Used by
  :mod:`gmts_core.sampling.categorical`; rows split over torch's threads.
- :meth:`DecodeKernels.linear` (``gmts_linear_rows``): x @ w^T (+ bias) (+ the output's own
  values) for at most :data:`LINEAR_MAX_ROWS` float32 rows, on CPUs with AVX2 and FMA. A decoding
  step multiplies each weight matrix by a few rows (its answers); the BLAS's general product
  then runs at about half the speed the weights can be read (135 M parameters: 146 ms a step
  for 8 rows against 61 ms here, one thread). The kernel reads each weight tile once, multiplies
  it by the rows from the level-1 cache and prefetches the next tile. Each output sums its k
  products in 8 lanes of fused multiply-adds, so its bits do not depend on the number of rows,
  their order or the threads (the BLAS's may), as long as the call stays within the kernel's
  rows: a call of more than :data:`LINEAR_MAX_ROWS` rows is torch's product, whose bits for a
  row differ from the kernel's. Used by the fused decoding step for every
  projection and by the sampler for the LM head (:mod:`gmts_core.sampling.kv_sampler`).

The fused decoding step takes the norms, the gate and the attention from :class:`DecodeKernels`,
which skips the per-call checks of the wrappers for tensors it checked once per step.

Building (:mod:`gmts_core.native.build`). ``gmts native build`` compiles the source ahead of time
with the system's C compiler (``$CC``, else ``cc``) and ``gmts serve`` builds or checks it at
startup; otherwise :func:`library` builds it on first use (about 4 s, once per machine). The
flags are ``-O3 -march=native -fno-fast-math -ffp-contract=off -fno-trapping-math`` (and, where
the compiler takes them, 512-bit vectors preferred and ``-fopenmp``:
:data:`gmts_core.native.build.VARIANTS`; the build's docstring says why each): NaN and
infinities propagate, and no multiply-add is fused into an FMA, whose rounding differs
between CPUs (``gmts_linear_rows`` uses FMA instructions explicitly and is offered only where
the CPU has them: elsewhere torch's product, as a BLAS differs between CPUs too). Built with
OpenMP, the library shares torch's OpenMP runtime (loaded first); each row's numbers are its
own, so the thread count never changes a result. The library is cached
under ``$GMTS_NATIVE_CACHE`` (default ``~/.cache/gmts-explorer/native``), named by a hash of the
source, the flags, the compiler and the CPU's flags, with a record of its SHA-256; a cached
library is loaded only when it, its record and the folder are the current user's, writable by
no one else, and its SHA-256 matches (else it is refused, logged, and built again). It is
loaded with ``ctypes``, which releases the GIL during a call.

``GMTS_NATIVE=0`` turns the kernels off. Without a compiler, or if the build fails, the callers
use their eager PyTorch path, and the log says so once. Both paths compute the same quantities
with the same float32 roundings of u and e = exp(u). The sums are accumulated in double here and
in float32 there, and the exponential differs by about one ulp. ``tests/gmts_core/test_native.py``
checks both against float64 references and each other.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from gmts_core.native.build import FLAGS, WIDE, cache_dir, compiler, ensure_built, status

logger = logging.getLogger(__name__)

MAX_TOP_K = 128  # kernels.c MAX_K
MAX_KEYS = 8192  # kernels.c gmts_attend_one's score buffer
# rows up to which gmts_linear_rows beats torch's product (one thread, 135 M parameters: 2.4x at
# 8 rows, 1.65x at 16, 1.4x at 32); more rows make a product the BLAS's blocking serves better
LINEAR_MAX_ROWS = 32
DTYPES = {torch.float32: 0, torch.bfloat16: 1}

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}

__all__ = [
    "FLAGS",
    "WIDE",
    "attend_one",
    "categorical",
    "cache_dir",
    "compiler",
    "decode_kernels",
    "enabled",
    "library",
    "rms_norm",
    "rotary_attend",
    "row_sums",
    "row_sums_supported",
    "silu_mul",
    "status",
]


def enabled() -> bool:
    """False when ``GMTS_NATIVE`` is 0, false, no or off."""
    return os.environ.get("GMTS_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    ptr, i64, f32, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
    lib.gmts_row_sums.argtypes = [ptr, i32, i64, i64, i64, i64, ptr, f32, i32, *[ptr] * 6]
    lib.gmts_row_sums.restype = i32
    lib.gmts_attend_one.argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, i64, ptr]
    lib.gmts_attend_one.restype = i32
    lib.gmts_rms_norm.argtypes = [ptr, ptr, i64, i64, f32, ptr]
    lib.gmts_rms_norm.restype = None
    lib.gmts_silu_mul.argtypes = [ptr, i64, i64, ptr]
    lib.gmts_silu_mul.restype = None
    lib.gmts_rotary_attend.argtypes = [
        ptr,
        i64,
        i64,
        i64,
        i64,
        ptr,
        ptr,
        f32,
        ptr,
        ptr,
        i64,
        i64,
        ptr,
        ptr,
        i32,
    ]
    lib.gmts_rotary_attend.restype = i32
    lib.gmts_categorical.argtypes = [ptr, ptr, i64, i64, f32, ptr, ptr, i32]
    lib.gmts_categorical.restype = None
    lib.gmts_linear_rows.argtypes = [ptr, i64, i64, ptr, i64, ptr, ptr, i32, i32]
    lib.gmts_linear_rows.restype = i32
    return lib


def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None (turned off, no compiler, an unsafe cache folder, or the
    build failed: logged once). Built (or the cached build checked) at most once per process."""
    if not enabled():
        return None
    with _LOCK:
        if "lib" not in _STATE:
            lib, reason = None, None
            cc = compiler()
            if cc is None:
                reason = "no C compiler found ($CC or cc)"
            else:
                try:
                    lib = _declare(ctypes.CDLL(str(ensure_built(cc).path)))
                except Exception as exc:  # noqa: BLE001 - any build or load failure: fall back
                    reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            if reason is not None:
                logger.warning("native CPU kernels unavailable, using PyTorch's ops: %s", reason)
            _STATE["lib"] = lib
        return _STATE["lib"]  # type: ignore[return-value]


def _pool(workers: int) -> ThreadPoolExecutor:
    with _LOCK:
        pool = _STATE.get("pool")
        if not isinstance(pool, ThreadPoolExecutor) or pool._max_workers != workers:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gmts-native")
            _STATE["pool"] = pool
        return pool


def row_sums_supported(logits: torch.Tensor, k: int) -> bool:
    """Whether :func:`row_sums` takes these (C, V) logits and this top-k width."""
    return (
        logits.device.type == "cpu"
        and logits.dtype in DTYPES
        and logits.dim() == 2
        and logits.stride(-1) == 1
        and 2 <= k <= min(MAX_TOP_K, logits.shape[-1])
        and library() is not None
    )


def row_sums(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, k: int
) -> tuple[torch.Tensor, ...]:
    """Per row of (C, V) logits: the top-k logits and ids (C, k), most probable first with ties
    by lower id; the target's logit (C,); and the sums s, q, p (C,) float64 over the tokens other
    than the top one and the target (:class:`gmts_core.stats.softmax_terms.RowSums`)."""
    lib = library()
    if lib is None or not row_sums_supported(logits, k):
        raise RuntimeError("row_sums: not supported for these logits (see row_sums_supported)")
    c, v = logits.shape
    targets = targets.to(torch.int64).contiguous()
    vals = torch.empty(c, k, dtype=torch.float32)
    ids = torch.empty(c, k, dtype=torch.int64)
    z_y = torch.empty(c, dtype=torch.float32)
    s, q, p = (torch.empty(c, dtype=torch.float64) for _ in range(3))
    outs = [t.data_ptr() for t in (vals, ids, z_y, s, q, p)]
    code, stride = DTYPES[logits.dtype], logits.stride(0)

    def run(lo: int, hi: int) -> int:
        return int(
            lib.gmts_row_sums(
                logits.data_ptr(), code, lo, hi, v, stride, targets.data_ptr(),
                float(temperature), k, *outs,
            )
        )  # fmt: skip

    workers = max(1, min(torch.get_num_threads(), c))
    if workers == 1:
        status = [run(0, c)]
    else:
        bounds = [c * i // workers for i in range(workers + 1)]
        ranges = zip(bounds[:-1], bounds[1:], strict=True)
        futures = [_pool(workers).submit(run, a, b) for a, b in ranges]
        status = [f.result() for f in futures]
    if any(status):
        raise ValueError("row_sums: a target id is outside the vocabulary")
    return vals, ids, z_y, s, q, p


def attend_one(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor | None:
    """softmax(q k^T) v for one query per head: q (N, g, d) float32 (scaling included), keys and
    values (N, T, d) views whose entries are T * d-strided rows of a cache buffer. None when the
    kernels are off or the layout is not theirs (the caller then uses batched matmuls)."""
    lib = library()
    n, g, d = q.shape
    t = keys.shape[1]
    if (
        lib is None
        or q.device.type != "cpu"
        or not (q.dtype == keys.dtype == values.dtype == torch.float32)
        or not q.is_contiguous()
        or keys.stride() != values.stride()
        or keys.stride()[1:] != (d, 1)
        or not 1 <= t <= MAX_KEYS
    ):
        return None
    out = torch.empty_like(q)
    ptrs = (q.data_ptr(), keys.data_ptr(), values.data_ptr())
    if lib.gmts_attend_one(*ptrs, n, g, d, t, keys.stride(0), out.data_ptr()) != 0:
        return None
    return out


def categorical(
    probs: torch.Tensor, uniforms: torch.Tensor, margin: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One draw per row of float32 weights (n, V) from exponential_'s uniforms (n, V) float64:
    the argmax of p / q with q = -log1p(-u) in float32, as ``torch.multinomial(p, 1)`` draws on
    CPU; and (n,) bool, the rows whose two largest ratios are within the factor 1 + ``margin``
    (or that hold a u of 0), which the caller redraws with libm's log1p. None when the kernels
    are off or the tensors are not contiguous float32 and float64 on CPU of one shape."""
    lib = library()
    if (
        lib is None
        or probs.dim() != 2
        or not _cpu_f32(probs)
        or uniforms.shape != probs.shape
        or uniforms.dtype != torch.float64
        or not uniforms.is_contiguous()
    ):
        return None
    n, v = probs.shape
    threads = torch.get_num_threads()
    tokens = torch.empty(n, dtype=torch.int64)
    uncertain = torch.empty(n, dtype=torch.bool)
    lib.gmts_categorical(
        probs.data_ptr(), uniforms.data_ptr(), n, v, float(margin),
        tokens.data_ptr(), uncertain.data_ptr(), threads,
    )  # fmt: skip
    return tokens, uncertain


def _cpu_f32(*tensors: torch.Tensor) -> bool:
    """Contiguous float32 on CPU, with no gradient to carry: the C kernels write plain memory,
    so where autograd records (grad mode on and a tensor that requires a gradient) torch's own
    ops take the work and keep the graph."""
    return all(
        t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors
    ) and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension of (n, d) float32 rows; None
    when the kernels are off or the tensors are not contiguous float32 on CPU."""
    lib = library()
    if lib is None or x.dim() != 2 or not _cpu_f32(x, weight) or weight.shape != x.shape[1:]:
        return None
    return DecodeKernels(lib).rms_norm(x, weight, float(eps))


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor | None:
    """silu(gate) * up for (n, 2 m) rows holding the gate then the up projection: (n, m); None
    when the kernels are off or the rows are not contiguous float32 on CPU."""
    lib = library()
    if lib is None or gate_up.dim() != 2 or gate_up.shape[1] % 2 or not _cpu_f32(gate_up):
        return None
    return DecodeKernels(lib).silu_mul(gate_up)


def rotary_attend(
    qkv: torch.Tensor,
    heads: tuple[int, int, int],
    rotary: tuple[torch.Tensor, torch.Tensor, float],
    buffers: tuple[torch.Tensor, torch.Tensor],
    pos: int,
    starts: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """One decoding step's attention from the projections ``qkv`` (n, (H + 2 KV) Dh), with
    ``heads`` = (H, KV, Dh): the keys rotated (``rotary`` = the rotary embedding's cos and sin
    tables (T, Dh), a row per position, and the attention's scaling, applied to the queries)
    and written with the values at slot ``pos`` of the cache ``buffers`` (n, KV, L, Dh) each,
    then each query head over its row's slots of its group. ``starts`` (n,) int64, if given, is
    each row's first slot (a shorter prompt right-aligned among longer ones: slot s holds
    position s - start); else every row starts at slot 0. Returns (n, H Dh), or None when the
    kernels are off or the layout is not theirs (nothing is written then)."""
    lib = library()
    (hq, kv, d), (cos, sin, scaling), (keys, values) = heads, rotary, buffers
    n = qkv.shape[0]
    if (
        lib is None
        or not _cpu_f32(qkv, cos, sin, keys, values)
        or qkv.shape != (n, (hq + 2 * kv) * d)
        or keys.shape != values.shape
        or keys.shape[:2] != (n, kv)
        or keys.shape[3] != d
        or cos.dim() != 2
        or cos.shape != sin.shape
        or cos.shape[1] != d
        or not pos < min(keys.shape[2], MAX_KEYS, cos.shape[0])
        or not _starts_fit(starts, n, pos)
    ):
        return None
    kernels = DecodeKernels(lib)
    try:
        return kernels.rotary_attend(qkv, heads, (cos, sin, float(scaling)), buffers, pos, starts)
    except ValueError:  # a size outside the kernel's buffers: nothing was written
        return None


def _starts_fit(starts: torch.Tensor | None, n: int, pos: int) -> bool:
    """``starts`` is None or (n,) contiguous int64 on CPU, each in 0..pos."""
    if starts is None:
        return True
    return (
        starts.dtype == torch.int64
        and starts.device.type == "cpu"
        and starts.shape == (n,)
        and starts.is_contiguous()
        and bool(((starts >= 0) & (starts <= pos)).all())
    )


class DecodeKernels:
    """:func:`rms_norm`, :func:`silu_mul` and :func:`rotary_attend` for a caller that checked
    once per decoding step what the checked wrappers check on every call (the fused decoding
    step, :mod:`gmts_core.sampling.fused_decode`): weights, cache buffers and rotary rows
    contiguous float32 on CPU, positions within the buffers. Its activations are then what
    torch's own ops make of such inputs (contiguous float32 on CPU), so each call here keeps
    only the shape checks that bound the kernels' memory accesses; on a small model the
    per-call lookups and checks cost about as much as the kernels."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self.threads = torch.get_num_threads()  # the attention's rows split over torch's threads
        self.linear_rows = _linear_rows_served(lib)

    def linear(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        into: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (m, k) @ weight (n, k)^T + bias: a new (m, n) tensor, or added in place into
        ``into`` (m, n) and returned. ``gmts_linear_rows`` where it serves (AVX2 and FMA, at most
        :data:`LINEAR_MAX_ROWS` rows, contiguous float32 on CPU, ``into`` in memory of its own);
        else torch's product, the same sum up to float rounding."""
        m, k = x.shape
        n = weight.shape[0]
        if weight.shape != (n, k) or (bias is not None and bias.shape != (n,)):
            raise ValueError("linear: the weight or bias does not fit the rows")
        if into is not None and into.shape != (m, n):
            raise ValueError("linear: the output does not fit the product")
        if (
            self.linear_rows
            and 1 <= m <= LINEAR_MAX_ROWS
            and _cpu_f32(x, weight, *(t for t in (bias, into) if t is not None))
            and (into is None or not _shares_storage(into, x, weight, bias))
        ):
            out = torch.empty(m, n, dtype=x.dtype) if into is None else into
            status = self._lib.gmts_linear_rows(
                x.data_ptr(), m, k, weight.data_ptr(), n,
                None if bias is None else bias.data_ptr(), out.data_ptr(),
                int(into is not None), self.threads,
            )  # fmt: skip
            if status == 0:
                return out
        if into is None:
            return torch.nn.functional.linear(x, weight, bias)
        if bias is None:
            return into.addmm_(x, weight.t())
        return into.add_(torch.nn.functional.linear(x, weight, bias))

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        n, d = x.shape
        if weight.shape != (d,):
            raise ValueError("rms_norm: the weight's width is not the rows'")
        out = torch.empty_like(x)
        self._lib.gmts_rms_norm(x.data_ptr(), weight.data_ptr(), n, d, eps, out.data_ptr())
        return out

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        n, width = gate_up.shape
        out = gate_up.new_empty(n, width // 2)
        self._lib.gmts_silu_mul(gate_up.data_ptr(), n, width // 2, out.data_ptr())
        return out

    def rotary_attend(
        self,
        qkv: torch.Tensor,
        heads: tuple[int, int, int],
        rotary: tuple[torch.Tensor, torch.Tensor, float],
        buffers: tuple[torch.Tensor, torch.Tensor],
        pos: int,
        starts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        (hq, kv, d), (cos, sin, scaling), (keys, values) = heads, rotary, buffers
        n = qkv.shape[0]
        if qkv.shape[1] != (hq + 2 * kv) * d or keys.shape[:2] != (n, kv):
            raise ValueError("rotary_attend: the projections do not fit the cache buffers")
        if cos.shape[0] <= pos or (starts is not None and starts.shape != (n,)):
            raise ValueError("rotary_attend: the rotary tables or starts do not fit")
        out = qkv.new_empty(n, hq * d)
        status = self._lib.gmts_rotary_attend(
            qkv.data_ptr(), n, hq, kv, d, cos.data_ptr(), sin.data_ptr(), scaling,
            keys.data_ptr(), values.data_ptr(), keys.shape[2], pos,
            None if starts is None else starts.data_ptr(), out.data_ptr(), self.threads,
        )  # fmt: skip
        if status:
            raise ValueError("rotary_attend: a size or start is outside the kernel's buffers")
        return out


def _shares_storage(out: torch.Tensor, *tensors: torch.Tensor | None) -> bool:
    """Whether ``out`` lies in the storage of any of ``tensors``: the kernel writes its outputs
    tile by tile while later tiles still read the operands."""
    ptr = out.untyped_storage().data_ptr()
    return any(t is not None and t.untyped_storage().data_ptr() == ptr for t in tensors)


def _linear_rows_served(lib: ctypes.CDLL) -> bool:
    """Whether the library's ``gmts_linear_rows`` computes (built for a CPU with AVX2 and FMA)
    rather than declining (status 2): asked once per process with a 1 x 1 product."""
    with _LOCK:
        if "linear_rows" not in _STATE:
            one = torch.ones(1, 1)
            out = torch.empty(1, 1)
            ptrs = (one.data_ptr(), one.data_ptr(), out.data_ptr())
            status = lib.gmts_linear_rows(ptrs[0], 1, 1, ptrs[1], 1, None, ptrs[2], 0, 1)
            _STATE["linear_rows"] = status == 0 and float(out) == 1.0
        return bool(_STATE["linear_rows"])


def decode_kernels() -> DecodeKernels | None:
    """The decoding step's kernels without per-call checks (:class:`DecodeKernels`), or None
    when the kernels are off."""
    lib = library()
    return None if lib is None else DecodeKernels(lib)
