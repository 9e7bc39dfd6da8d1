"""CPU kernels in C for the two loops that eager PyTorch cannot make cheap, with eager fallbacks.

``kernels.c`` holds two loops, described in its own header:

- :func:`row_sums`: the token statistics' sums (:mod:`gmts_core.stats.softmax_terms`) from two
  reads of each float32 or bfloat16 logit and no writes. Eager PyTorch needs a float32 copy
  and about seven passes over it.
- :func:`attend_one`: one-query attention for the sampler's fused decoding step
  (:mod:`gmts_core.fused_decode`). On CPU a batched matmul over hundreds of (1 x 16) @ (16 x T)
  products costs far more than their arithmetic.

The source is compiled on first use with the system's C compiler (``$CC``, else ``cc``). The
flags are ``-O3 -march=native`` (512-bit vectors preferred where the CPU has them), without
``-ffast-math``, so NaN and infinities propagate. The
library is cached under ``$GMTS_NATIVE_CACHE`` (default ``~/.cache/gmts-explorer/native``),
named by a hash of the source, the flags, the compiler and the CPU's flags. Compiling takes
about a second, and only once per machine. It is loaded with ``ctypes``, which releases the GIL
during a call: :func:`row_sums` splits its rows over ``torch.get_num_threads()`` threads.

``GMTS_NATIVE=0`` turns the kernels off. Without a compiler, or if the build fails, the callers
use their eager PyTorch path, and the log says so once. Both paths compute the same quantities
with the same float32 roundings of u and e = exp(u). The sums are accumulated in double here and
in float32 there, and the exponential differs by about one ulp. ``tests/gmts_core/test_native.py``
checks both against float64 references.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-shared", "-fPIC")
# tried first: full-width vectors where the CPU has AVX-512 (the compiler's default is 256 bits,
# 1.7x slower on the statistics' sums); a compiler that does not know the flag builds without
WIDE = ("-mprefer-vector-width=512",)
COMPILE_TIMEOUT_S = 120
MAX_TOP_K = 128  # kernels.c MAX_K
MAX_KEYS = 8192  # kernels.c gmts_attend_one's score buffer
DTYPES = {torch.float32: 0, torch.bfloat16: 1}

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def _enabled() -> bool:
    return os.environ.get("GMTS_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """Where the compiled library is kept (``$GMTS_NATIVE_CACHE``)."""
    env = os.environ.get("GMTS_NATIVE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gmts-explorer" / "native"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _build(compiler: str) -> Path:
    try:
        return _build_with(compiler, (*FLAGS, *WIDE))
    except RuntimeError:
        return _build_with(compiler, FLAGS)


def _build_with(compiler: str, flags: tuple[str, ...]) -> Path:
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    parts = [SOURCE.read_text(), " ".join(flags), version, platform.machine(), _cpu_flags()]
    key = "\n".join(parts)
    out_dir = cache_dir()
    target = out_dir / f"kernels-{hashlib.sha256(key.encode()).hexdigest()[:20]}.so"
    if target.exists():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        built = Path(tmp) / target.name
        cmd = [compiler, *flags, "-o", str(built), str(SOURCE), "-lm"]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip()[-400:] or f"{compiler} failed")
        os.replace(built, target)  # atomic: a concurrent build writes the same bytes
    return target


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
    ]
    lib.gmts_rotary_attend.restype = i32
    return lib


def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None (turned off, no compiler, or the build failed: logged
    once). Built at most once per process."""
    if not _enabled():
        return None
    with _LOCK:
        if "lib" not in _STATE:
            lib, reason = None, None
            compiler = _compiler()
            if compiler is None:
                reason = "no C compiler found ($CC or cc)"
            else:
                try:
                    lib = _declare(ctypes.CDLL(str(_build(compiler))))
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


def _cpu_f32(*tensors: torch.Tensor) -> bool:
    return all(
        t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension of (n, d) float32 rows; None
    when the kernels are off or the tensors are not contiguous float32 on CPU."""
    lib = library()
    if lib is None or x.dim() != 2 or not _cpu_f32(x, weight) or weight.shape != x.shape[1:]:
        return None
    out = torch.empty_like(x)
    lib.gmts_rms_norm(x.data_ptr(), weight.data_ptr(), *x.shape, float(eps), out.data_ptr())
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor | None:
    """silu(gate) * up for (n, 2 m) rows holding the gate then the up projection: (n, m); None
    when the kernels are off or the rows are not contiguous float32 on CPU."""
    lib = library()
    if lib is None or gate_up.dim() != 2 or gate_up.shape[1] % 2 or not _cpu_f32(gate_up):
        return None
    n, width = gate_up.shape
    out = gate_up.new_empty(n, width // 2)
    lib.gmts_silu_mul(gate_up.data_ptr(), n, width // 2, out.data_ptr())
    return out


def rotary_attend(
    qkv: torch.Tensor,
    heads: tuple[int, int, int],
    rotary: tuple[torch.Tensor, torch.Tensor, float],
    buffers: tuple[torch.Tensor, torch.Tensor],
    pos: int,
) -> torch.Tensor | None:
    """One decoding step's attention from the projections ``qkv`` (n, (H + 2 KV) Dh), with
    ``heads`` = (H, KV, Dh): the keys rotated (``rotary`` = the position's cos and sin rows
    (Dh,) and the attention's scaling, applied to the queries) and written with the values at
    ``pos`` of the cache ``buffers`` (n, KV, L, Dh) each, then each query head over positions
    0..pos of its group. Returns (n, H Dh), or None when the kernels are off or the layout is
    not theirs (nothing is written then)."""
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
        or cos.shape != (d,)
        or sin.shape != (d,)
        or not pos < min(keys.shape[2], MAX_KEYS)
    ):
        return None
    out = qkv.new_empty(n, hq * d)
    ptrs = [t.data_ptr() for t in (cos, sin)]
    status = lib.gmts_rotary_attend(
        qkv.data_ptr(), n, hq, kv, d, *ptrs, float(scaling),
        keys.data_ptr(), values.data_ptr(), keys.shape[2], pos, out.data_ptr(),
    )  # fmt: skip
    return None if status else out
