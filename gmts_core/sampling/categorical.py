"""``torch.multinomial(probs, 1)``'s draws, bit for bit, without its slow CPU loop.

On CPU, ``multinomial(p, 1)`` is ``argmax(p / q)`` with ``q = empty_like(p).exponential_(1)``,
and ``exponential_`` fills ``q`` one element at a time: a double ``u`` from the generator's
``random64()``, then libm's ``-log1p(-u)``, cast to ``p``'s dtype. That serial loop is most of
the draw's time. :func:`categorical` takes the same ``u`` from ``torch.rand(..., dtype=float64)``
(the same generator calls in the same order, hence the same generator state after) and forms
``q`` with vectorized ops, a block of rows at a time.

Those ops are not libm's: a variate can be an ulp off, which moves its ratio ``p / q`` by a
relative 2**-22 at most (float32). A row's argmax is thus certain when its two largest ratios
are further apart than :data:`_MARGIN`; the rare rows where they are not are redrawn from the
same ``u`` with libm's own ``log1p`` (:func:`math.log1p`), as ``exponential_`` computes them.
Tokens and generator state are then multinomial's exactly. That rests on torch internals (the
transform, the generator calls, libm), so a probe checks it on first use (:func:`exact`); where
it fails, and for anything but ordinary weights in a 2-D contiguous float32/float64 CPU tensor,
:func:`categorical` is ``torch.multinomial``.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

import torch

from gmts_core import native

logger = logging.getLogger(__name__)

# how much larger than the second a row's largest ratio must be for its argmax to be certain:
# far above the error of ratios whose variates are an ulp or two off (2**-22 float32, 2**-50 f64)
_MARGIN = {torch.float32: 2.0**-16, torch.float64: 2.0**-40}

_BLOCK = 2**17  # elements drawn at a time: their doubles (1 MiB) stay in cache

_verdicts: dict[bool, bool] = {}  # the probe's, once per process and path (native or not)
_lock = threading.Lock()


def categorical(probs: torch.Tensor, softmax_of_finite: bool = False) -> torch.Tensor:
    """One draw per row: (B, V) probabilities (or weights) -> (B,) int64 token ids, those of
    ``torch.multinomial(probs, 1).squeeze(1)`` from the same global CPU generator state.
    ``softmax_of_finite``: the caller made ``probs`` as the softmax of rows whose maximum is
    finite, so they are ordinary weights (finite, non-negative, each row's largest at least
    1 / V) and the check for that is skipped."""
    if _eligible(probs) and exact() and (softmax_of_finite or _ordinary(probs.detach())):
        return _categorical(probs.detach())  # a draw has no gradient
    return torch.multinomial(probs, num_samples=1).squeeze(-1)


def exact() -> bool:
    """Whether :func:`categorical`'s own draws are multinomial's here (probed on first use, for
    the path in use: the native kernel's float32 draws, or the vectorized torch ops')."""
    path = native.library() is not None
    with _lock:
        if path not in _verdicts:
            try:
                verdict = _probe()
            except Exception:  # a probe that cannot run is one that failed
                logger.exception("the categorical draw probe raised")
                verdict = False
            if not verdict:
                logger.warning("categorical draws differ from torch.multinomial's here: using it")
            _verdicts[path] = verdict
        return _verdicts[path]


def _eligible(probs: torch.Tensor) -> bool:
    return (
        probs.device.type == "cpu"
        and probs.dtype in _MARGIN
        and probs.dim() == 2
        and probs.is_contiguous()
        and probs.size(0) > 0
        and 2 <= probs.size(1) <= 2**24
    )


def _ordinary(probs: torch.Tensor) -> bool:
    """Finite, non-negative weights, and every row's largest far above underflow (so are the
    ratios that decide its draw); multinomial itself draws from, or raises for, the others."""
    low, high = torch.aminmax(probs.amax(1))
    return float(high) < math.inf and float(low) > 2**-100 and float(probs.amin()) >= 0


def _variates(u: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``exponential_(1)``'s variates from its uniforms, in ``dtype``, to an ulp or two of
    double: ``|log(1 - u)|`` (``1 - u`` is exact, and ``abs`` keeps ``u = 0``'s ``+0``)."""
    return torch.log(1 - u, out=torch.empty(u.shape, dtype=dtype)).abs_()


def _categorical(probs: torch.Tensor) -> torch.Tensor:
    # blocks of rows drawn in turn take the generator's numbers in the same order as one draw
    rows = max(1, _BLOCK // probs.size(1))
    if rows >= len(probs):
        return _draw_block(probs)
    return torch.cat([_draw_block(block) for block in probs.split(rows)])


def _draw_block(probs: torch.Tensor) -> torch.Tensor:
    u = _uniforms(probs.shape)  # (b, V): exponential_'s uniforms
    drawn = native.categorical(probs, u, _MARGIN[probs.dtype])  # C, float32
    if drawn is not None:
        tokens, uncertain = drawn
        if bool(uncertain.any()):
            for row in uncertain.nonzero().flatten().tolist():
                tokens[row] = _exact_row(probs[row], u[row])
        return tokens
    q = _variates(u, probs.dtype)
    ratio = torch.div(probs, q, out=q)
    first, tokens = ratio.max(1)
    second = ratio.scatter_(1, tokens[:, None], -math.inf).amax(1)
    certain = first > second * (1 + _MARGIN[probs.dtype])
    if not bool(certain.all()):
        for row in (~certain).nonzero().flatten().tolist():
            tokens[row] = _exact_row(probs[row], u[row])
    return tokens


def _exact_row(probs: torch.Tensor, u: torch.Tensor) -> int:
    """A row's draw from ``exponential_``'s very variates: libm's ``-log1p(-u)``."""
    q = torch.tensor([-math.log1p(-x) for x in u.tolist()], dtype=torch.float64)
    return int(torch.argmax(probs / q.to(probs.dtype)))


def _probe() -> bool:
    """Draw both ways from the same seeds (float32 and float64, rows with zeros, one-hot,
    uniform and two-token rows, a long vocabulary in two blocks) and compare the tokens (also
    of the libm redraw), the generator states and the variates; the global CPU generator is
    left as it was."""
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(6, 3000, generator=gen), -1)
    p[:, ::3] = 0
    p[1] = 0
    p[1, 17] = 1
    p[2] = 1
    p[3, :-2] = 0
    wide = torch.softmax(torch.randn(3, 50000, generator=gen), -1)
    with torch.random.fork_rng(devices=[]):
        for seed, probs in enumerate([p, p.double(), p[3:4, -2:].contiguous(), wide]):
            want, want_state = _seeded(seed, torch.multinomial, probs, 1)
            got, got_state = _seeded(seed, _categorical, probs)
            if not (torch.equal(got, want[:, 0]) and torch.equal(got_state, want_state)):
                return False
            if probs is wide:  # too long for the libm redraw below
                continue
            u, _ = _seeded(seed, _uniforms, probs.shape)
            if [_exact_row(row, x) for row, x in zip(probs, u, strict=True)] != want[:, 0].tolist():
                return False
        q32, q32_state = _seeded(9, torch.empty(20000).exponential_, 1)
        q64, q64_state = _seeded(9, torch.empty(20000, dtype=torch.float64).exponential_, 1)
        u, state = _seeded(9, _uniforms, (20000,))
    libm = torch.tensor([-math.log1p(-x) for x in u[:2000].tolist()], dtype=torch.float64)
    return (
        torch.equal(state, q32_state)
        and torch.equal(state, q64_state)
        and torch.equal(_variates(u, torch.float32), q32)
        and torch.equal(libm, q64[:2000])
        and bool(((_variates(u, torch.float64) - q64).abs() <= 2**-44 * q64).all())
    )


def _uniforms(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.rand(shape, dtype=torch.float64)


def _seeded(
    seed: int, fn: Callable[..., torch.Tensor], *args: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn(*args)`` drawn from the CPU generator seeded with ``seed``, and its state after."""
    torch.default_generator.manual_seed(seed)
    out = fn(*args)
    return out, torch.get_rng_state()
