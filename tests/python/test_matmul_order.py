"""The block32 order (docs/numerics.md, "The block32 order"): AMX's TDPBF16PS order, selectable.

Promises checked here, on both block32 kernels this machine runs (AMX where the CPU has it, and
the portable reference, which a forced "portable" variant takes) and, above the single-thread
threshold, at 1, 2 and 3 threads:
- the float32 result of a block32 product is the oracle's block32 accumulator bit for bit (NaN as
  0x7FC00000), and its bf16 result that value rounded to nearest even;
- on the "ci" roster (views, special values, empty shapes), random shapes across K's block and
  panel boundaries, fills near fp32's flush threshold, and forced shared-chunk blockings;
- the order is recorded when a product is made, per thread, per call, and a product's gradients
  are computed in its order.
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

import tgrad
import tgrad.orders
from tgrad import errors
from tgrad._ffi import lib
from tgrad.conformance.oracle import matmul_bits, matmul_f32
from tgrad.conformance.rosters import build_operands, roster

CASES = roster("ci")
SMALL_MNK = 1 << 21  # cpu/frame.h: below it the calling thread works alone
CANONICAL_NAN = np.uint32(0x7FC00000)


@pytest.fixture(autouse=True)
def _restore_runtime_settings():
    threads, isa, order = tgrad.num_threads(), tgrad._cpu_isa_setting(), tgrad.get_matmul_order()
    yield
    tgrad.set_num_threads(threads)
    tgrad.set_cpu_isa(isa)
    tgrad.set_matmul_order(order)
    lib.tgrad_debug_cpu_blocking(0, 0, 0)


def _kernels() -> list[str]:
    """Variant settings that reach each block32 kernel: the automatic one (AMX where it runs, else
    the pairwise packed variant's instruction), each forced variant this CPU runs that has a block32
    kernel of its own (avx512bf16: vdpbf16ps, avx512f and avx2: FMAs) and forced portable (the
    portable block32 kernel). Under a forced-variant test run (TGRAD_CPU_ISA) the run's own
    setting stands in for the automatic one."""
    runs = tgrad.cpu_isas()
    own = [v for v in ("avx512bf16", "avx512f", "avx2") if runs.get(v)]
    return sorted({tgrad._cpu_isa_setting(), "portable", *own})


def _cpu_has_amx() -> bool:
    """Whether this machine's CPU reports AMX-BF16 (Linux); the AMX kernel must then run."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return " amx_bf16" in flags and " amx_tile" in flags


def _expected_block32_kernel() -> str:
    """The block32 kernel the selection rule (cpu/variants.c) names for this process's setting:
    forced, each variant's own (avx512bf16: vdpbf16ps, avx512f and avx2: FMAs, portable and the
    others: the portable one); automatic, AMX where it runs, else the pairwise packed variant's."""
    setting = tgrad._cpu_isa_setting()
    own = {"avx512bf16": "avx512bf16_block32", "avx512f": "avx512f_block32", "avx2": "avx2_block32"}
    if tgrad.cpu_isa_forced():
        return own.get(setting, "portable_block32")
    if _cpu_has_amx():
        return "amx"
    return own.get(tgrad.cpu_isa(), "portable_block32")


def _oracle32(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    acc = matmul_f32(a_bits, b_bits, order="block32")
    return np.where(np.isnan(acc), CANONICAL_NAN, acc.view(np.uint32)).astype(np.uint32)


def _rne_bf16(f32_bits: np.ndarray) -> np.ndarray:
    u = f32_bits.astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, 0x7FC0, (u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _describe(got: np.ndarray, want: np.ndarray, width: int) -> str:
    bad = np.argwhere(got != want)
    lines = [f"{len(bad)} of {want.size} outputs differ"]
    for idx in bad[:5]:
        lines.append(f"  C{tuple(int(i) for i in idx)}: got 0x{int(got[tuple(idx)]):0{width}x}, "
                     f"want 0x{int(want[tuple(idx)]):0{width}x}")
    return "\n".join(lines)


def _check(label: str, a_t, b_t, want32: np.ndarray, threads: list[int]) -> None:
    for isa in _kernels():
        tgrad.set_cpu_isa(isa)
        # the portable reference is slow: one thread count (its threading is the frame's, the same)
        for n in threads[:1] if isa == "portable" else threads:
            tgrad.set_num_threads(n)
            c32 = tgrad.matmul(a_t, b_t, out_dtype=tgrad.float32, order="block32")
            c16 = tgrad.matmul(a_t, b_t, order="block32")
            got32, got16 = c32.numpy().view(np.uint32), c16.numpy().view(np.uint16)
            where = f"{label} [isa={isa}, threads={n}, route={c16.route}]"
            assert got32.shape == want32.shape, where
            if not np.array_equal(got32, want32):
                pytest.fail(f"{where} float32: " + _describe(got32, want32, 8))
            if not np.array_equal(got16, _rne_bf16(want32)):
                pytest.fail(f"{where} bf16: " + _describe(got16, _rne_bf16(want32), 4))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_roster_case_gives_the_block32_oracle(case):
    a_base, b_base, view = build_operands(case)
    a_bits, b_bits = view(a_base, "a").view(np.uint16), view(b_base, "b").view(np.uint16)
    a_t = view(tgrad.Tensor.from_numpy(a_base), "a")
    b_t = view(tgrad.Tensor.from_numpy(b_base), "b")
    want = _oracle32(a_bits, b_bits)
    assert np.array_equal(_rne_bf16(want), matmul_bits(a_bits, b_bits, order="block32"))
    threaded = case.m * case.k * case.n >= SMALL_MNK
    _check(case.id, a_t, b_t, want, [1, 2, 3] if threaded else [tgrad.num_threads()])


def _random_bits(rng: np.random.Generator, shape: tuple[int, int], fill: str) -> np.ndarray:
    if fill == "near_flush":
        # exponents such that products lie around 2^-126 and partial sums cross the flush threshold
        sign = rng.integers(0, 2, shape).astype(np.uint16) << 15
        exp = rng.integers(127 - 66, 127 - 58, shape).astype(np.uint16) << 7
        return sign | exp | rng.integers(0, 128, shape).astype(np.uint16)
    x = rng.standard_normal(shape).astype(ml_dtypes.bfloat16).view(np.uint16)
    if fill == "special":  # NaN, +-inf, subnormals, -0 at random places
        picks = np.array([0x7FC0, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x8000], dtype=np.uint16)
        mask = rng.random(shape) < 0.02
        x = np.where(mask, picks[rng.integers(0, len(picks), shape)], x).astype(np.uint16)
    return x


# K across the block (32) and the kernels' panels (512), M across AMX's 16- and 32-row tiles and
# past 384 (shared chunks: K sub-panels of 512 within one chunk panel, with and without the tasks
# owning their columns, and K past one chunk panel of 4096), N = 1 (the matrix-vector swap), M = 1.
SHAPES = [(1, 300, 70), (70, 300, 1), (5, 1100, 33), (130, 700, 97), (400, 40, 50), (3, 5, 600), (13, 1, 17),
          (17, 31, 33), (33, 32, 31), (48, 33, 64), (64, 1025, 65), (129, 96, 200), (400, 600, 70),
          (400, 600, 160), (390, 4130, 33)]


@pytest.mark.parametrize("fill", ["normal", "special", "near_flush"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_random_shapes_give_the_block32_oracle(shape, fill):
    m, k, n = shape
    rng = np.random.default_rng(m * 1000003 + k * 101 + n + len(fill))
    a_bits, b_bits = _random_bits(rng, (m, k), fill), _random_bits(rng, (k, n), fill)
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    threaded = m * k * n >= SMALL_MNK
    _check(f"{m}x{k}x{n} {fill}", a_t, b_t, _oracle32(a_bits, b_bits), [1, 2, 3] if threaded else [1])


def test_near_flush_fill_reaches_the_flush_threshold():
    """The near_flush fill is not vacuous: the oracle flushes some partial sums there, and the
    two orders' fp32 accumulators differ somewhere."""
    rng = np.random.default_rng(3)
    a_bits, b_bits = _random_bits(rng, (16, 96), "near_flush"), _random_bits(rng, (96, 16), "near_flush")
    acc = matmul_f32(a_bits, b_bits, order="block32")
    assert (acc == 0).any() and (np.abs(acc[acc != 0]) >= 2.0**-126).all()
    assert not np.array_equal(acc.view(np.uint32), matmul_f32(a_bits, b_bits, order="pairwise").view(np.uint32))


def test_threaded_views_give_the_block32_oracle():
    """Above the threshold, through a transposed A and a sliced, column-major B."""
    rng = np.random.default_rng(7)
    a_base = rng.standard_normal((530, 150)).astype(ml_dtypes.bfloat16)
    b_base = rng.standard_normal((140, 1100)).astype(ml_dtypes.bfloat16)
    a_np, b_np = a_base.T, b_base.T[:1060:2, :]  # [150, 530] @ [530, 140]
    a_t = tgrad.Tensor.from_numpy(a_base).T
    b_t = tgrad.Tensor.from_numpy(b_base).T[:1060:2, :]
    want = _oracle32(np.ascontiguousarray(a_np).view(np.uint16), np.ascontiguousarray(b_np).view(np.uint16))
    _check("views 150x530x140", a_t, b_t, want, [1, 2, 3])


BLOCKINGS = [(16 << 10, 64, 0), (4 << 10, 8, 1), (64 << 10, 100, 0)]


@pytest.mark.parametrize("blocking", BLOCKINGS, ids=[f"chunk{b[0]}-panel{b[1]}-flags{b[2]}" for b in BLOCKINGS])
def test_shared_chunks_and_k_panels_give_the_block32_oracle(blocking):
    """Small caps force the shared-chunk path with many chunks and K panels; a panel depth that is
    not a multiple of 32 is rounded up to one for block32 (its panels start at blocks)."""
    rng = np.random.default_rng(11)
    a_bits, b_bits = _random_bits(rng, (61, 203), "special"), _random_bits(rng, (203, 77), "special")
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    want = _oracle32(a_bits, b_bits)
    assert lib.tgrad_debug_cpu_blocking(*blocking) == 0
    _check(f"61x203x77 blocking={blocking}", a_t, b_t, want, [1, 3])


def test_batched_and_fused_block32_products_give_the_oracle():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 20, 70)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((3, 70, 40)).astype(ml_dtypes.bfloat16)
    at, bt = tgrad.Tensor.from_numpy(a), tgrad.Tensor.from_numpy(b)
    with tgrad.matmul_order("block32"):
        c = at @ bt
        fused = tgrad.relu(at @ bt)
    want = np.stack([matmul_bits(a[i].view(np.uint16), b[i].view(np.uint16), order="block32") for i in range(3)])
    assert np.array_equal(c.numpy().view(np.uint16), want)
    relu = np.where((want & 0x8000) != 0, np.uint16(0), want)  # relu of bf16 bits: negatives (and -0) to +0
    relu = np.where((want & 0x7FFF) > 0x7F80, want, relu)  # NaN stays
    assert np.array_equal(fused.numpy().view(np.uint16), relu.astype(np.uint16))


@pytest.mark.parametrize("shape", [(400, 600, 300), (400, 600, 70), (390, 4130, 40)], ids=lambda s: "x".join(map(str, s)))
def test_a_fused_epilogue_on_shared_chunks_gives_the_oracle(shape):
    """Products past 384 rows take the shared-chunk path (AMX: K sub-panels, tasks owning their
    columns or not, K past one chunk panel); the epilogue runs on each finished block."""
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    a_bits, b_bits = _random_bits(rng, (m, k), "special"), _random_bits(rng, (k, n), "special")
    want = matmul_bits(a_bits, b_bits, order="block32")
    relu = np.where((want & 0x8000) != 0, np.uint16(0), want)
    relu = np.where((want & 0x7FFF) > 0x7F80, want, relu).astype(np.uint16)
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    for isa in _kernels():
        tgrad.set_cpu_isa(isa)
        with tgrad.matmul_order("block32"):
            got = tgrad.relu(a_t @ b_t).numpy().view(np.uint16)
        assert np.array_equal(got, relu), f"[isa={isa}] " + _describe(got, relu, 4)


# ---- the setting ------------------------------------------------------------------------------


def test_order_is_recorded_when_the_product_is_made():
    rng = np.random.default_rng(9)
    a_bits, b_bits = _random_bits(rng, (24, 200), "near_flush"), _random_bits(rng, (200, 24), "near_flush")
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    assert tgrad.get_matmul_order() == "block32"  # the default since 0.2
    assert np.array_equal(matmul_f32(a_bits, b_bits).view(np.uint32), _oracle32(a_bits, b_bits))  # the oracle's too
    with tgrad.matmul_order("pairwise"):
        assert tgrad.get_matmul_order() == "pairwise"
        lazy = tgrad.matmul(a_t, b_t, out_dtype=tgrad.float32)
    assert tgrad.get_matmul_order() == "block32"
    block32 = tgrad.matmul(a_t, b_t, out_dtype=tgrad.float32)
    want = matmul_f32(a_bits, b_bits, order="pairwise").view(np.uint32)
    assert np.array_equal(lazy.numpy().view(np.uint32), want)  # realized outside
    assert np.array_equal(block32.numpy().view(np.uint32), _oracle32(a_bits, b_bits))
    assert not np.array_equal(want, _oracle32(a_bits, b_bits))  # the orders are told apart here
    # a per-call order wins over the thread's
    with tgrad.matmul_order("block32"):
        per_call = tgrad.matmul(a_t, b_t, out_dtype=tgrad.float32, order="pairwise")
    assert np.array_equal(per_call.numpy().view(np.uint32), want)


def test_order_is_per_thread():
    seen: list[str] = []
    with tgrad.matmul_order("pairwise"):
        t = threading.Thread(target=lambda: seen.append(tgrad.get_matmul_order()))
        t.start()
        t.join()
        assert tgrad.get_matmul_order() == "pairwise"
    assert seen == ["block32"]  # a new thread starts at the default


def test_route_names_the_block32_kernel():
    a = tgrad.Tensor.from_numpy(np.ones((40, 64), np.float32))
    c = tgrad.matmul(a, a.T, order="block32")
    c.numpy()
    kernel = _expected_block32_kernel()
    assert c.route == f"cpu.{kernel}.gemm"
    assert f"cpu.{kernel}.gemm" in tgrad.explain(tgrad.matmul(a, a.T, order="block32"))


@pytest.mark.parametrize("bad", ["Block32", "amx", "", 1, None])
def test_unknown_orders_are_refused(bad):
    a = tgrad.Tensor.from_numpy(np.ones((2, 2), np.float32))
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.set_matmul_order(bad)
    with pytest.raises(errors.InvalidArgumentError):
        with tgrad.matmul_order(bad):
            pass
    if bad is not None:
        with pytest.raises(errors.InvalidArgumentError):
            tgrad.matmul(a, a, order=bad)
    assert tgrad.get_matmul_order() == "block32"
    live = tgrad.live_tensors()
    assert lib.tgrad_set_matmul_order(2) == errors.InvalidArgumentError.status
    assert tgrad.live_tensors() == live


def test_gradients_of_a_block32_product_are_block32_products():
    rng = np.random.default_rng(13)
    a_bits, b_bits = _random_bits(rng, (20, 90), "near_flush"), _random_bits(rng, (90, 30), "near_flush")
    g_bits = _random_bits(rng, (20, 30), "near_flush")
    a_t = tgrad.Tensor.from_bf16_bits(a_bits).requires_grad_()
    c = tgrad.matmul(a_t, tgrad.Tensor.from_bf16_bits(b_bits), order="block32")
    c.backward(tgrad.Tensor.from_bf16_bits(g_bits))
    assert a_t.grad is not None
    want = matmul_bits(g_bits, np.ascontiguousarray(b_bits.T), order="block32")
    assert np.array_equal(a_t.grad.numpy().view(np.uint16), want)
    assert not np.array_equal(want, matmul_bits(g_bits, np.ascontiguousarray(b_bits.T), order="pairwise"))


def test_kernel_names_explain_and_peak_follow_the_order():
    kernel = _expected_block32_kernel()
    assert tgrad.matmul_order_kernel("block32") == kernel
    assert tgrad.matmul_order_kernel("pairwise") == tgrad.cpu_isa()
    assert tgrad.matmul_order_kernel() == kernel  # the default order's
    a = tgrad.Tensor.from_numpy(np.ones((4, 4), np.float32))
    assert "| order block32 |" in tgrad.explain(a @ a)
    with tgrad.matmul_order("pairwise"):
        assert tgrad.matmul_order_kernel() == tgrad.cpu_isa()
        assert "| order pairwise |" in tgrad.explain(a @ a)


@pytest.mark.parametrize("fill", ["normal", "special", "near_flush"])
@pytest.mark.parametrize("k", [1, 31, 32, 33, 300, 1057, 8300])  # 8300: AVX2 widens A a block at a time
@pytest.mark.parametrize("layout", ["row-major B", "column-major B"])
def test_one_row_products_stream_b_in_the_block32_order(layout, k, fill):
    """One-row block32 products (a decoding step) stream B in place (route rowvec: vdpbf16ps,
    AVX-512 or AVX2 FMAs; the portable variant takes its packed kernel),
    row-major B or column-major (x @ W.T), and give the oracle's bytes."""
    n = 70
    rng = np.random.default_rng(k * 7 + len(fill) + len(layout))
    a_bits = _random_bits(rng, (1, k), fill)
    b_bits = _random_bits(rng, (k, n), fill)
    a_t = tgrad.Tensor.from_bf16_bits(a_bits)
    b_t = tgrad.Tensor.from_bf16_bits(b_bits) if layout == "row-major B" \
        else tgrad.Tensor.from_bf16_bits(np.ascontiguousarray(b_bits.T)).T
    want = _rne_bf16(_oracle32(a_bits, b_bits))
    for isa in _kernels():
        tgrad.set_cpu_isa(isa)
        c = tgrad.matmul(a_t, b_t, order="block32")
        got = c.numpy().view(np.uint16)
        if tgrad.cpu_isas().get("avx512f") and isa in ("auto", "avx512f", "avx512bf16"):
            # vdpbf16ps where the CPU has it (not under a forced avx512f), else AVX-512 FMAs
            bf16 = tgrad.cpu_isas().get("avx512bf16") and isa != "avx512f"
            assert c.route == f"cpu.{'avx512bf16' if bf16 else 'avx512f'}_block32.rowvec"
        elif isa == "avx2":
            assert c.route == "cpu.avx2_block32.rowvec"
        assert np.array_equal(got, want), f"[isa={isa}, route={c.route}] " + _describe(got, want, 4)


@pytest.mark.parametrize("fill", ["normal", "special", "near_flush"])
@pytest.mark.parametrize("m,k", [(2, 1), (3, 33), (4, 300), (4, 1057), (16, 64)])
def test_few_row_products_give_the_block32_oracle(m, k, fill):
    """Few-row block32 products over row-major B (a small batch's decode step) take a streaming
    hook where a kernel has one (vdpbf16ps: 16 rows, 8 under AMX where B has 2^16 elements or
    more: the 4 x 1057 case; AVX2: 4 rows) and give the oracle's bytes."""
    n = 70
    rng = np.random.default_rng(m * 1000 + k + len(fill))
    a_bits, b_bits = _random_bits(rng, (m, k), fill), _random_bits(rng, (k, n), fill)
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    want = _rne_bf16(_oracle32(a_bits, b_bits))
    for isa in _kernels():
        tgrad.set_cpu_isa(isa)
        c = tgrad.matmul(a_t, b_t, order="block32")
        got = c.numpy().view(np.uint16)
        if isa == "avx2":
            assert c.route == f"cpu.avx2_block32.{'skinny' if m <= 4 else 'gemm'}"
        elif isa == "avx512bf16":
            assert c.route == "cpu.avx512bf16_block32.skinny"
        elif tgrad.matmul_order_kernel("block32") == "amx":  # AMX: up to 8 rows on vdpbf16ps, B not small
            assert c.route == ("cpu.avx512bf16_block32.skinny" if m <= 8 and k * n >= 65536 else "cpu.amx.gemm")
        assert np.array_equal(got, want), f"[isa={isa}, route={c.route}] " + _describe(got, want, 4)


@pytest.mark.parametrize("fill", ["normal", "special", "near_flush"])
@pytest.mark.parametrize("m,k,n", [(1, 300, 260), (2, 300, 260), (3, 1057, 260), (17, 300, 260), (64, 33, 260),
                                   # the two largest, 1.3-2 s each on 2 cores: the slow tier's
                                   pytest.param(128, 1057, 260, marks=pytest.mark.slow), (129, 300, 260),
                                   (3, 64, 4100), pytest.param(40, 8300, 70, marks=pytest.mark.slow), (16, 64, 300)])
def test_few_rows_times_a_column_major_b_give_the_block32_oracle(m, k, n, fill):
    """x @ W.T with a few rows (2 to 128) on AMX is computed as
    (W @ x.T).T (route gemm_t: W's rows read in place, only x packed; cpu/plan.c): the oracle's
    bytes, bf16 and float32, through sliced views, fused with a bias and GELU, merged batches and
    1 or 2 threads, and the packed route's bytes. Below 2^16 elements of W (64 x 33) and past 128
    rows the packed route stays. gemm_t streams W's rows through all of K where x, packed, fits in
    1 MiB (cpu/gemm_t.c: strips with a packed last tile, 260 = 8 x 32 + 4 rows); past that (40 x
    8300), or with W packed (TGRAD_DEBUG_CPU_NO_DIRECT_A), it runs on the packed frame in chunks
    of 4096 columns (3 x 64 x 4100). One row streams (rowvec), its float32 result the fp32 sums (rowvec_f32);
    without AMX, up to 16 rows stream a W of at most 2^17 elements (a decode step's attention
    scores over the KV cache: 16 x 64 x 300), bf16 or the fp32 sums: read once for all the rows
    on vdpbf16ps (route skinny), as that many one-row products on AVX2; a larger W (3 x 1057 x
    260) is packed once."""
    rng = np.random.default_rng(m * 7919 + k + len(fill))
    x_big, w_big = _random_bits(rng, (m + 1, k + 3), fill), _random_bits(rng, (n + 2, k + 5), fill)
    bias = _random_bits(rng, (n,), "normal")
    x_bits, w_bits = x_big[1:, 3:], w_big[2:, 2:k + 2]  # views with offsets and row strides
    x_t = tgrad.Tensor.from_bf16_bits(x_big)[1:, 3:]
    w_t = tgrad.Tensor.from_bf16_bits(w_big)[2:, 2:k + 2]
    b_t = tgrad.Tensor.from_bf16_bits(bias)
    want32 = _oracle32(np.ascontiguousarray(x_bits), np.ascontiguousarray(w_bits.T))
    want = _rne_bf16(want32)
    fused_want = ((tgrad.Tensor.from_bf16_bits(want) + b_t).gelu()).numpy().view(np.uint16)
    amx = tgrad.matmul_order_kernel("block32") == "amx"
    for isa in _kernels():
        tgrad.set_cpu_isa(isa)
        for threads in (1, 2):
            tgrad.set_num_threads(threads)
            c = tgrad.matmul(x_t, w_t.T, order="block32")
            c32 = tgrad.matmul(x_t, w_t.T, out_dtype=tgrad.float32, order="block32")
            got = c.numpy().view(np.uint16)
            if isa == "auto" and amx:
                t_route = m <= 128 and k * n >= 65536
                if m == 1:  # one row streams W in place, bf16 or float32 (the fp32 sums stored)
                    assert c32.route == c.route == "cpu.avx512bf16_block32.rowvec", (m, k, c32.route)
                else:
                    assert c32.route == ("cpu.amx.gemm_t" if t_route else "cpu.amx.gemm"), (m, k, c32.route)
                    assert c.route == c32.route, (m, k, c.route)
            elif isa == "avx2":  # no AMX: up to 16 rows stream a small W's rows in place, row by row
                rows = m <= 16 and k * n <= 1 << 17
                assert c.route == c32.route == f"cpu.avx2_block32.{'rowvec' if rows else 'gemm'}", (m, k, c.route, c32.route)
            elif isa == "avx512bf16" and 1 < m <= 16 and k * n <= 1 << 17:  # a small W read once for all the rows
                assert c.route == c32.route == "cpu.avx512bf16_block32.skinny", (m, k, c.route, c32.route)
            got32 = c32.numpy().view(np.uint32)
            assert np.array_equal(got32, want32), f"[isa={isa}, threads={threads}, route={c32.route}] " + _describe(
                got32, want32, 8)
            assert np.array_equal(got, want), f"[isa={isa}, threads={threads}, route={c.route}] " + _describe(got, want, 4)
            with tgrad.matmul_order("block32"):
                fused = (x_t @ w_t.T + b_t).gelu().numpy().view(np.uint16)
                merged = (tgrad.Tensor.from_bf16_bits(np.stack([x_bits, x_bits[::-1]])) @ w_t.T).numpy().view(np.uint16)
            assert np.array_equal(fused, fused_want), f"[isa={isa}, threads={threads}] fused"
            lib.tgrad_debug_cpu_blocking(0, 0, lib.TGRAD_DEBUG_CPU_NO_GEMM_T)  # the packed route instead
            try:
                packed = tgrad.matmul(x_t, w_t.T, order="block32")
                assert "gemm_t" not in packed.route
                assert np.array_equal(packed.numpy().view(np.uint16), want), f"[isa={isa}] {packed.route}"
                lib.tgrad_debug_cpu_blocking(0, 0, lib.TGRAD_DEBUG_CPU_NO_DIRECT_A)  # gemm_t on the packed frame
                chunked = tgrad.matmul(x_t, w_t.T, order="block32")
                chunked32 = tgrad.matmul(x_t, w_t.T, out_dtype=tgrad.float32, order="block32")
                assert np.array_equal(chunked.numpy().view(np.uint16), want), f"[isa={isa}] {chunked.route}"
                assert np.array_equal(chunked32.numpy().view(np.uint32), want32), f"[isa={isa}] {chunked32.route}"
            finally:
                lib.tgrad_debug_cpu_blocking(0, 0, 0)
                w2 = tgrad.Tensor.from_bf16_bits(np.stack([np.ascontiguousarray(w_bits), w_bits[::-1].copy()]))
                apart = (tgrad.Tensor.from_bf16_bits(np.stack([x_bits, x_bits])) @ w2.mT).numpy().view(np.uint16)
            assert np.array_equal(merged[0], want) and np.array_equal(merged[1], want[::-1]), f"[isa={isa}] batch"
            assert np.array_equal(apart[0], want) and np.array_equal(apart[1], want[:, ::-1]), f"[isa={isa}] batches"


def test_a_trace_records_the_order_and_validates_block32_products():
    """tgrad.trace keeps each product's order in its args and replays it through the oracle in
    that order (a fill where the two orders' bf16 results differ: a replay in the wrong order
    would fail)."""
    m, k, n = 32, 100, 32
    rng = np.random.default_rng(21)
    h = k // 2
    x = rng.standard_normal((m, h)).astype(ml_dtypes.bfloat16).view(np.uint16)
    y = rng.standard_normal((h, n)).astype(ml_dtypes.bfloat16).view(np.uint16)
    perm = np.concatenate([np.arange(s, min(s + 16, h))[::-1] for s in range(0, h, 16)])
    a = np.empty((m, k), np.uint16)
    b = np.empty((k, n), np.uint16)
    a[:, 0::2], a[:, 1::2] = x, x[:, perm]
    b[0::2], b[1::2] = y, y[perm] ^ np.uint16(0x8000)
    assert not np.array_equal(matmul_bits(a, b, order="pairwise"), matmul_bits(a, b, order="block32"))
    at, bt = tgrad.Tensor.from_bf16_bits(a), tgrad.Tensor.from_bf16_bits(b)
    with tgrad.matmul_order("pairwise"):
        t1 = tgrad.trace(lambda p, q: p @ q, at, bt)
    t2 = tgrad.trace(lambda p, q: tgrad.matmul(p, q, order="pairwise"), at, bt)
    t3 = tgrad.trace(lambda p, q: p @ q, at, bt)
    for t, order in ((t1, "pairwise"), (t2, "pairwise"), (t3, "block32")):
        (op,) = [o for o in t.ops if o.kind == "matmul"]
        assert op.args == {"order": order}
        assert t.validate().state == "passed", t.validate()


def test_amx_says_whether_it_runs_and_why_not():
    """tgrad_cpu_amx_check: OK where the AMX kernel runs (block32 takes it unless a variant is
    forced), else BackendUnavailableError with the reason; doctor reports the same."""
    why = tgrad.orders.amx_unavailable()
    if _cpu_has_amx():
        assert why is None
    else:
        assert why is not None and "AMX" in why
        assert tgrad.matmul_order_kernel("block32") != "amx"
    from tgrad import doctor

    facts = doctor.collect(peak=False).facts
    assert facts["cpu"]["matmul_order"]["amx"] == (why or "available")
