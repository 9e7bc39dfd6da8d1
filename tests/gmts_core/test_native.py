"""The native CPU kernels (gmts_core.native): equal to float64 references and to the PyTorch path,
and out of the way when they cannot be built. Their build and cache: test_native_build.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from gmts_core import native
from gmts_core.native import build
from gmts_core.stats import metrics

needs_compiler = pytest.mark.skipif(
    native.compiler() is None, reason="no C compiler here: the native kernels are not built"
)


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("GMTS_NATIVE", "1")
    built = native.library()
    assert built is not None, "a C compiler is present, so the kernels must build"
    return built


def _reference_sums(z: torch.Tensor, target: int, tau: float) -> tuple[float, float, float]:
    """s, q, p in float64 from the float32 u = (z - r) / tau the kernel rounds to."""
    order = torch.argsort(z.double(), descending=True, stable=True)
    top, runner_up = int(order[0]), float(z[order[1]])
    u = (z.float() - runner_up) / tau if tau != 1.0 else z.float() - runner_up
    keep = torch.ones_like(z, dtype=torch.bool)
    keep[[top, target]] = False
    u = u.double()[keep]
    e = u.exp()
    return float(e.sum()), float((e * e).sum()), float((e * u)[e > 0].sum())


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tau", [1.0, 0.6])
def test_row_sums_equal_float64_sums(lib: object, dtype: torch.dtype, tau: float) -> None:
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(7, 3001, generator=g) * 4).to(dtype)
    logits[1, 17] = 60.0  # a near-certain row
    logits[2, :100] = float("-inf")  # masked tokens
    targets = torch.randint(0, 3001, (7,), generator=g)
    targets[1] = 17  # the target is the top token
    vals, ids, z_y, s, q, p = native.row_sums(logits, targets, tau, 5)
    want_vals, _ = logits.float().topk(5, dim=-1)
    assert torch.equal(vals, want_vals)
    assert torch.equal(logits.float().gather(-1, ids), want_vals)  # the ids hold those values
    assert torch.equal(z_y, logits.float().gather(-1, targets[:, None])[:, 0])
    for row in range(7):
        ws, wq, wp = _reference_sums(logits[row].float(), int(targets[row]), tau)
        # the kernel's exp is within about one ulp of float64's: relative 2e-7 per term
        assert s[row].item() == pytest.approx(ws, rel=3e-7)
        assert q[row].item() == pytest.approx(wq, rel=3e-7)
        assert p[row].item() == pytest.approx(wp, rel=3e-7, abs=1e-30)


@needs_compiler
def test_row_sums_ties_lower_id_first_and_strided_rows(lib: object) -> None:
    base = torch.zeros(4, 40, dtype=torch.bfloat16)
    base[:, [30, 5, 12]] = 2.0  # a three-way tie at the top
    rows = base[::2]  # every other row: a row stride of 80 elements
    vals, ids, *_ = native.row_sums(rows, torch.tensor([0, 39]), 1.0, 4)
    assert ids[:, :3].tolist() == [[5, 12, 30]] * 2
    assert vals[:, 3].tolist() == [0.0, 0.0] and ids[:, 3].tolist() == [0, 0]


@needs_compiler
def test_row_sums_propagate_nan_and_reject_bad_targets(lib: object) -> None:
    logits = torch.randn(2, 50)
    logits[0, 7] = float("nan")
    _, _, _, s, q, p = native.row_sums(logits, torch.tensor([1, 2]), 1.0, 2)
    assert s[0].isnan() and not s[1].isnan()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        native.row_sums(logits, torch.tensor([1, 50]), 1.0, 2)
    assert not native.row_sums_supported(logits.double(), 2)  # float64: PyTorch's ops
    assert not native.row_sums_supported(logits, native.MAX_TOP_K + 1)


@needs_compiler
def test_statistics_equal_on_both_paths(lib: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same statistics from the kernel and from PyTorch's ops, on every thread count."""
    logits = (torch.randn(3, 9, 2000, generator=torch.Generator().manual_seed(5)) * 3).bfloat16()
    targets = torch.randint(0, 2000, (3, 9), generator=torch.Generator().manual_seed(6))
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            ours = metrics.token_stats(logits, targets, 0.8, top_k=5, chunk_size=10)
            monkeypatch.setenv("GMTS_NATIVE", "0")
            eager = metrics.token_stats(logits, targets, 0.8, top_k=5, chunk_size=10)
            monkeypatch.setenv("GMTS_NATIVE", "1")
            for name in ("logprob", "entropy", "grad_norm", "sum_sq_prob", "top_logprobs"):
                assert_close(getattr(ours, name), getattr(eager, name), rtol=2e-6, atol=1e-7)
    finally:
        torch.set_num_threads(threads)


def _attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    scores = q.double() @ keys.double().transpose(1, 2)  # (N, g, T)
    return (scores.softmax(-1) @ values.double()).float()


@needs_compiler
@pytest.mark.parametrize("d", [16, 64, 24])  # two unrolled widths and the general loop
@pytest.mark.parametrize("g", [1, 3])  # query heads per key/value head
@pytest.mark.parametrize("t", [1, 7, 40])
def test_attend_one_equals_softmax_attention(lib: object, d: int, g: int, t: int) -> None:
    gen = torch.Generator().manual_seed(d * 100 + g * 10 + t)
    cache_k, cache_v = (torch.randn(5, 2, 48, d, generator=gen) for _ in range(2))  # (n, KV, L, d)
    keys = cache_k[:, :, :t].view(10, t, d)  # views of the first t positions, as the sampler's
    values = cache_v[:, :, :t].view(10, t, d)
    q = torch.randn(10, g, d, generator=gen)
    out = native.attend_one(q, keys, values)
    assert out is not None
    assert_close(out, _attention(q, keys, values), rtol=2e-6, atol=2e-6)


@needs_compiler
def test_attend_one_declines_what_it_does_not_take(lib: object) -> None:
    q, kv = torch.randn(4, 1, 16), torch.randn(4, 8, 16)
    assert native.attend_one(q.double(), kv.double(), kv.double()) is None
    assert native.attend_one(q, kv.transpose(1, 2).contiguous().transpose(1, 2), kv) is None
    assert native.attend_one(q, kv[:, :0], kv[:, :0]) is None


def test_off_or_unbuildable_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    logits = torch.randn(2, 30)
    targets = torch.tensor([0, 1])
    monkeypatch.setenv("GMTS_NATIVE", "0")
    assert native.library() is None and not native.row_sums_supported(logits, 2)
    want = metrics.token_stats(logits, targets, top_k=3)
    monkeypatch.setenv("GMTS_NATIVE", "1")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setattr(native, "_STATE", {})  # as in a fresh process
    with caplog.at_level(logging.WARNING, logger="gmts_core.native"):
        assert native.library() is None
    assert "no C compiler" in caplog.text
    got = metrics.token_stats(logits, targets, top_k=3)
    assert_close(got.entropy, want.entropy) and assert_close(got.top_logprobs, want.top_logprobs)


@needs_compiler
def test_rms_norm_and_gate_equal_torch(lib: object) -> None:
    gen = torch.Generator().manual_seed(8)
    x, weight = torch.randn(9, 40, generator=gen) * 3, torch.randn(40, generator=gen)
    out = native.rms_norm(x, weight, 1e-5)
    assert out is not None
    assert_close(out, torch.nn.functional.rms_norm(x, (40,), weight, 1e-5), rtol=1e-6, atol=1e-6)
    gate_up = torch.randn(9, 2 * 33, generator=gen) * 20  # large |x|: exp(-x) overflows to inf
    gated = native.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, -1)
    assert gated is not None
    assert_close(gated, torch.nn.functional.silu(gate) * up, rtol=2e-6, atol=1e-6)
    assert native.rms_norm(x.t(), weight, 1e-5) is None  # not contiguous
    assert native.silu_mul(gate_up[:, :-1].contiguous()) is None  # an odd width


def _rotary_tables(length: int, d: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """cos and sin tables (length, d): a random angle per position and frequency, as the rotary
    embedding's (each half repeated)."""
    angles = torch.rand(length, d // 2, generator=gen) * 6
    return torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)


@needs_compiler
@pytest.mark.parametrize(("hq", "kv", "d"), [(4, 4, 16), (6, 2, 24)])
@pytest.mark.parametrize("ragged", [False, True], ids=["from-slot-0", "own-first-slots"])
def test_rotary_attend_equals_the_rotary_attention(
    lib: object, hq: int, kv: int, d: int, ragged: bool
) -> None:
    """Keys rotated into the cache at slot pos, queries rotated and scaled, each over its
    group's slots: equal to the same steps in torch ops, float64. With starts (prompts of
    different lengths, right-aligned), row i is rotated at position pos - start_i and reads
    only slots start_i..pos."""
    gen = torch.Generator().manual_seed(hq * d)
    n, length, pos, scaling = 3, 12, 7, d**-0.5
    keys, values = (torch.randn(n, kv, length, d, generator=gen) for _ in range(2))
    before_k, before_v = keys.clone(), values.clone()
    qkv = torch.randn(n, (hq + 2 * kv) * d, generator=gen)
    cos_t, sin_t = _rotary_tables(length, d, gen)
    starts = torch.tensor([0, 3, 7]) if ragged else None
    first = torch.zeros(n, dtype=torch.long) if starts is None else starts
    rotary = (cos_t, sin_t, scaling)
    out = native.rotary_attend(qkv, (hq, kv, d), rotary, (keys, values), pos, starts)
    assert out is not None

    def rotate(x: torch.Tensor, row: int) -> torch.Tensor:  # (..., d) as apply_rotary_pos_emb
        half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
        at = pos - int(first[row])
        return x * cos_t[at].double() + half * sin_t[at].double()

    q, k, v = qkv.double().split([hq * d, kv * d, kv * d], -1)
    for row in range(n):
        k_rot = rotate(k[row].view(kv, d), row)
        assert_close(keys[row, :, pos].double(), k_rot, rtol=1e-6, atol=1e-6)
        assert torch.equal(values[row, :, pos], v[row].view(kv, d).float())
        lo = int(first[row])  # the slots before a row's start are never read
        group_k = keys[row, :, lo : pos + 1].double().repeat_interleave(hq // kv, 0)
        group_v = values[row, :, lo : pos + 1].double().repeat_interleave(hq // kv, 0)
        scores = (rotate(q[row].view(hq, 1, d), row) * scaling) @ group_k.transpose(-1, -2)
        want = (scores.softmax(-1) @ group_v).reshape(hq * d)
        assert_close(out[row].double(), want, rtol=2e-6, atol=2e-6)
    keep = torch.ones(length, dtype=torch.bool)
    keep[pos] = False  # nothing else in the cache is touched
    assert torch.equal(keys[:, :, keep], before_k[:, :, keep])
    assert torch.equal(values[:, :, keep], before_v[:, :, keep])
    buffers = (keys, values)
    assert native.rotary_attend(qkv, (hq, kv, d), rotary, buffers, 12, starts) is None
    late = torch.tensor([0, 3, pos + 1])  # a start past the slot written: refused, not read
    assert native.rotary_attend(qkv, (hq, kv, d), rotary, buffers, pos, late) is None
    assert native.rotary_attend(qkv, (hq, kv, d), rotary, buffers, pos, late.int()) is None


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@needs_compiler
def test_the_kernels_split_over_threads_give_the_same_bits(lib: object, threads: None) -> None:
    """The decoding step's attention, its projections and the categorical draw split their rows
    (the projections: weight tiles) over torch's threads (where built with OpenMP): each
    output's numbers are its own, so 1, 2 and 3 threads give the same bits (and the same cache
    writes)."""
    gen = torch.Generator().manual_seed(5)
    hq, kv, d, n, length, pos = 4, 2, 16, 37, 20, 11
    qkv = torch.randn(n, (hq + 2 * kv) * d, generator=gen)
    cos, sin = _rotary_tables(length, d, gen)
    probs = torch.softmax(3 * torch.randn(n, 300, generator=gen), -1)
    uniforms = torch.rand(n, 300, generator=gen, dtype=torch.float64)
    x, weight = torch.randn(5, 40, generator=gen), torch.randn(23, 40, generator=gen)
    results = []
    for count in (1, 2, 3):
        torch.set_num_threads(count)
        keys, values = torch.zeros(n, kv, length, d), torch.zeros(n, kv, length, d)
        kernels = native.decode_kernels()
        assert kernels is not None and kernels.threads == count
        starts = torch.arange(n) % (pos + 1)  # rows of different prompt lengths
        out = kernels.rotary_attend(qkv, (hq, kv, d), (cos, sin, 0.25), (keys, values), pos, starts)
        drawn = native.categorical(probs, uniforms, 2.0**-16)
        assert drawn is not None
        results.append((out, keys, values, *drawn, kernels.linear(x, weight)))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)


def _linear_kernels() -> native.DecodeKernels:
    kernels = native.decode_kernels()
    assert kernels is not None
    if not kernels.linear_rows:
        pytest.skip("this CPU lacks AVX2 or FMA: gmts_linear_rows declines (torch's product)")
    return kernels


@needs_compiler
@pytest.mark.parametrize("m", [1, 2, 3, 8, native.LINEAR_MAX_ROWS])
@pytest.mark.parametrize(("n", "k"), [(1, 1), (7, 9), (5, 8), (23, 40), (64, 576)])
def test_linear_rows_equal_float64_products(lib: object, m: int, n: int, k: int) -> None:
    """x @ w^T + bias (+ the output's values) against float64, for row counts odd and even,
    widths not a multiple of the kernel's 8 lanes or of its 5-row weight tiles."""
    kernels = _linear_kernels()
    gen = torch.Generator().manual_seed(m * 1000 + n * 10 + k)
    x, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
    bias, before = torch.randn(n, generator=gen), torch.randn(m, n, generator=gen)
    exact = x.double() @ w.double().t()
    # float32 rounding of k products and sums: relative to the sum of |products|
    scale = (x.double().abs() @ w.double().abs().t()) + 1.0
    for b in (None, bias):
        for into in (None, before.clone()):
            got = kernels.linear(x, w, b, into=into)
            want = exact + (0 if b is None else b.double())
            want = want + (0 if into is None else before.double())
            bound = 4e-7 * (k + 2) * (scale + before.double().abs())
            assert got.dtype == torch.float32 and got.shape == (m, n)
            assert ((got.double() - want).abs() <= bound).all()
            if into is not None:
                assert got.data_ptr() == into.data_ptr()  # written in place


@needs_compiler
def test_linear_rows_bits_do_not_depend_on_the_batch(lib: object) -> None:
    """Each output is one row's dot product with one weight row: a row's result is the same bits
    alone, in any batch of at most LINEAR_MAX_ROWS rows, at any position (the sampler's answers
    do not depend on which other answers share such a call; more rows take torch's product)."""
    kernels = _linear_kernels()
    gen = torch.Generator().manual_seed(11)
    x, w = torch.randn(9, 100, generator=gen), torch.randn(37, 100, generator=gen)
    full = kernels.linear(x, w)
    for row in range(9):
        assert torch.equal(kernels.linear(x[row : row + 1].contiguous(), w)[0], full[row])
    order = torch.tensor([8, 3, 0, 5])
    assert torch.equal(kernels.linear(x[order].contiguous(), w), full[order])


@needs_compiler
def test_linear_declines_to_torch_outside_its_rows(lib: object) -> None:
    """More rows than LINEAR_MAX_ROWS, strided rows or another dtype take torch's product (the
    same sums up to rounding); shapes that do not fit are refused before any memory is read."""
    kernels = _linear_kernels()
    gen = torch.Generator().manual_seed(2)
    w, bias = torch.randn(6, 16, generator=gen), torch.randn(6, generator=gen)
    for x in (
        torch.randn(native.LINEAR_MAX_ROWS + 1, 16, generator=gen),
        torch.randn(16, 4, generator=gen).t(),  # not contiguous
    ):
        assert_close(kernels.linear(x, w, bias), torch.nn.functional.linear(x, w, bias))
        into = torch.randn(x.shape[0], 6, generator=gen)
        want = into + torch.nn.functional.linear(x, w, bias)
        assert_close(kernels.linear(x, w, bias, into=into), want)
    x64 = torch.randn(3, 16, dtype=torch.float64, generator=gen)
    assert_close(kernels.linear(x64, w.double()), x64 @ w.double().t())
    with pytest.raises(ValueError, match="weight"):
        kernels.linear(torch.randn(2, 15), w)
    with pytest.raises(ValueError, match="weight or bias"):
        kernels.linear(torch.randn(2, 16), w, torch.randn(5))
    with pytest.raises(ValueError, match="output"):
        kernels.linear(torch.randn(2, 16), w, into=torch.randn(3, 6))


@needs_compiler
def test_where_autograd_records_the_kernels_leave_the_work_to_torch(lib: object) -> None:
    """The C kernels write plain memory and keep no graph: with grad mode on and a tensor that
    requires a gradient, linear (and the norms and gates, through the same check) take torch's
    ops, so a gradient through them is autograd's, never a silent zero."""
    kernels = _linear_kernels()
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 16, generator=gen)
    w = torch.randn(6, 16, generator=gen, requires_grad=True)
    out = kernels.linear(x, w)
    assert out.grad_fn is not None
    out.sum().backward()
    assert w.grad is not None
    assert_close(w.grad, torch.ones(3, 6).t() @ x)  # d sum(x w^T) / dw
    weight = torch.ones(16, requires_grad=True)
    assert native.rms_norm(x, weight, 1e-6) is None  # the caller's torch norm keeps the graph
    with torch.no_grad():  # sampling: the kernels serve
        assert native.rms_norm(x, weight, 1e-6) is not None
        assert kernels.linear(x, w).grad_fn is None


@needs_compiler
def test_categorical_forms_only_the_ratios_that_matter(lib: object) -> None:
    """The draw forms p / q only above its cut (q >= u bounds every ratio by p / u), yet its
    token and flag are those of all the ratios. Each row gets a new best A and a runner-up B,
    both tiny weights over tiny variates (so A's lower bound sets the cut and B's ratio is just
    under its own bound p / u): B within the margin of A is found and flags the row (rows 0-7),
    B twice the margin below leaves it decided (rows 8-15); rows 16-23 are as drawn."""
    margin = 2.0**-10
    gen = torch.Generator().manual_seed(7)
    n, v = 24, 5000
    probs = torch.softmax(6 * torch.randn(n, v, generator=gen), -1)
    u = torch.rand(n, v, generator=gen, dtype=torch.float64)

    def variate(x: torch.Tensor) -> float:
        return float(-torch.log1p(-x).float())

    best = (probs / (-torch.log1p(-u)).float()).amax(1)
    for row in range(16):
        a, b = (7 * row + 3) % v, (11 * row + 5) % v
        top = float(best[row]) * (1 + 4 * margin)
        u[row, a], u[row, b] = 1e-9, 2e-9
        probs[row, a] = top * variate(u[row, a])
        probs[row, b] = top * (1 - (margin / 2 if row < 8 else 2 * margin)) * variate(u[row, b])
    ratios = probs / (-torch.log1p(-u)).float()
    top2 = ratios.topk(2, dim=1).values
    want_flag = ~(top2[:, 0] > top2[:, 1] * (1 + margin))
    drawn = native.categorical(probs.contiguous(), u, margin)
    assert drawn is not None
    tokens, uncertain = drawn
    assert uncertain[:8].all() and not uncertain[8:].any()
    assert torch.equal(uncertain, want_flag)
    assert torch.equal(tokens[8:], ratios.argmax(1)[8:])


@needs_compiler
def test_linear_into_its_own_rows(lib: object) -> None:
    """``into`` sharing memory with x: the kernel would write outputs that later tiles read as
    inputs; the product is torch's, as if the rows had been read first."""
    kernels = _linear_kernels()
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(4, 16, generator=gen), torch.randn(16, 16, generator=gen)
    want = x + x @ w.t()
    rows = x.clone()
    assert_close(kernels.linear(rows, w, into=rows), want)
