"""matmul(a, b, out_dtype=tgrad.float32): the fp32 accumulators of the documented order, unrounded.

Two promises, checked on every CPU variant this machine runs and, above the single-thread
threshold, at 1, 2 and 3 threads:
- the float32 result is the oracle's accumulator (``conformance.oracle.matmul_f32``) bit for bit,
  NaN as the canonical 0x7FC00000;
- the bf16 result of the same product is that float32 value rounded to nearest even (NaN 0x7FC0).
Operands come from the "ci" roster (below-tile, tall and wide, empty and K = 0, views: transposes,
slices with steps, reshape, expand; special values: NaN, inf, subnormals), plus shapes that take
the packed frame's multi-panel and shared-chunk paths.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import errors
from tgrad._ffi import ffi, lib
from tgrad.conformance.oracle import matmul_bits, matmul_f32
from tgrad.conformance.rosters import build_operands, roster

CASES = roster("ci")
SMALL_MNK = 1 << 21  # cpu/frame.h: below it the calling thread works alone
CANONICAL_NAN = np.uint32(0x7FC00000)


def _variants() -> list[str]:
    return [name for name, runnable in tgrad.cpu_isas().items() if runnable]


@pytest.fixture(autouse=True)
def _restore_runtime_settings():
    threads, isa = tgrad.num_threads(), tgrad._cpu_isa_setting()
    yield
    tgrad.set_num_threads(threads)
    tgrad.set_cpu_isa(isa)  # the choice it found: a forced-variant run stays forced
    lib.tgrad_debug_cpu_blocking(0, 0, 0)


def _oracle_f32_bits(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    acc = matmul_f32(a_bits, b_bits)
    return np.where(np.isnan(acc), CANONICAL_NAN, acc.view(np.uint32)).astype(np.uint32)


def _rne_bf16(f32_bits: np.ndarray) -> np.ndarray:
    """f32 bits to bf16 by round to nearest even, NaN made 0x7FC0 (written here, not libtgrad's)."""
    u = f32_bits.astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def _describe(got: np.ndarray, want: np.ndarray, width: int) -> str:
    bad = np.argwhere(got != want)
    lines = [f"{len(bad)} of {want.size} outputs differ"]
    for i, j in bad[:5]:
        lines.append(f"  C[{i},{j}]: got 0x{int(got[i, j]):0{width}x}, want 0x{int(want[i, j]):0{width}x}")
    return "\n".join(lines)


def _check(label: str, a_t, b_t, want32: np.ndarray, threads: list[int]) -> None:
    """Every variant at each thread count: float32 bits == oracle, bf16 == RNE(float32)."""
    for isa in _variants():
        tgrad.set_cpu_isa(isa)
        for n in threads:
            tgrad.set_num_threads(n)
            c32 = tgrad.matmul(a_t, b_t, out_dtype=tgrad.float32)
            c16 = a_t @ b_t
            assert c32.dtype == tgrad.float32 and c16.dtype == tgrad.bfloat16
            got32 = c32.numpy().view(np.uint32)
            got16 = c16.numpy().view(np.uint16)
            where = f"{label} [isa={isa}, threads={n}, route={c32.route}]"
            assert got32.shape == want32.shape, where
            if not np.array_equal(got32, want32):
                pytest.fail(f"{where} float32: " + _describe(got32, want32, 8))
            if not np.array_equal(got16, _rne_bf16(got32)):
                pytest.fail(f"{where} bf16 != RNE(float32): " + _describe(got16, _rne_bf16(got32), 4))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_roster_case_gives_the_oracle_accumulators(case):
    a_base, b_base, view = build_operands(case)
    a_bits, b_bits = view(a_base, "a").view(np.uint16), view(b_base, "b").view(np.uint16)
    a_t = view(tgrad.Tensor.from_numpy(a_base), "a")
    b_t = view(tgrad.Tensor.from_numpy(b_base), "b")
    want = _oracle_f32_bits(a_bits, b_bits)
    # the oracle's own bf16 is the same rounding of the same accumulators
    assert np.array_equal(_rne_bf16(want), matmul_bits(a_bits, b_bits))
    threaded = case.m * case.k * case.n >= SMALL_MNK
    _check(case.id, a_t, b_t, want, [1, 2, 3] if threaded else [tgrad.num_threads()])


def _random_bits(rng: np.random.Generator, shape: tuple[int, int], special: bool) -> np.ndarray:
    x = rng.standard_normal(shape).astype(ml_dtypes.bfloat16).view(np.uint16)
    if special:  # NaN, +-inf, subnormals, -0 at random places
        picks = np.array([0x7FC0, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x8000], dtype=np.uint16)
        mask = rng.random(shape) < 0.02
        x = np.where(mask, picks[rng.integers(0, len(picks), shape)], x).astype(np.uint16)
    return x


# K past the variants' panel depth (256, 512) keeps accumulators between K panels; M past 384
# takes the shared-chunk path; N = 1 and M = 1 are the shapes the bf16 routes stream.
SHAPES = [(1, 300, 70), (70, 300, 1), (5, 1100, 33), (130, 700, 97), (400, 40, 50), (3, 5, 600), (13, 1, 17)]


@pytest.mark.parametrize("special", [False, True], ids=["normal", "special"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_random_shapes_give_the_oracle_accumulators(shape, special):
    m, k, n = shape
    rng = np.random.default_rng(m * 1000003 + k * 101 + n + special)
    a_bits, b_bits = _random_bits(rng, (m, k), special), _random_bits(rng, (k, n), special)
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    threaded = m * k * n >= SMALL_MNK
    _check(f"{m}x{k}x{n}", a_t, b_t, _oracle_f32_bits(a_bits, b_bits), [1, 2, 3] if threaded else [1])


def test_threaded_views_give_the_oracle_accumulators():
    """Above the threshold, through a transposed A and a sliced, column-major B."""
    rng = np.random.default_rng(7)
    a_base = rng.standard_normal((530, 150)).astype(ml_dtypes.bfloat16)
    b_base = rng.standard_normal((140, 1100)).astype(ml_dtypes.bfloat16)
    a_np, b_np = a_base.T, b_base.T[:1060:2, :]  # [150, 530] @ [530, 140]
    a_t = tgrad.Tensor.from_numpy(a_base).T
    b_t = tgrad.Tensor.from_numpy(b_base).T[:1060:2, :]
    assert a_t.shape == a_np.shape and b_t.shape == b_np.shape
    want = _oracle_f32_bits(np.ascontiguousarray(a_np).view(np.uint16), np.ascontiguousarray(b_np).view(np.uint16))
    _check("views 150x530x140", a_t, b_t, want, [1, 2, 3])


BLOCKINGS = [(16 << 10, 64, 0), (4 << 10, 8, 1)]


@pytest.mark.parametrize("blocking", BLOCKINGS, ids=[f"chunk{b[0]}-panel{b[1]}-flags{b[2]}" for b in BLOCKINGS])
def test_shared_chunks_and_k_panels_give_the_oracle_accumulators(blocking):
    """Small caps force the shared-chunk path with many chunks and K panels (accumulators kept in
    the chunk between panels), with A read in place and packed."""
    rng = np.random.default_rng(11)
    a_bits, b_bits = _random_bits(rng, (61, 203), True), _random_bits(rng, (203, 77), True)
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    want = _oracle_f32_bits(a_bits, b_bits)
    assert lib.tgrad_debug_cpu_blocking(*blocking) == 0
    _check(f"61x203x77 blocking={blocking}", a_t, b_t, want, [1, 3])


def test_k_zero_gives_positive_zeros_and_empty_shapes_stay_empty():
    z = tgrad.matmul(tgrad.Tensor.from_numpy(np.zeros((3, 0), np.float32)),
                     tgrad.Tensor.from_numpy(np.zeros((0, 4), np.float32)), out_dtype=tgrad.float32)
    assert z.dtype == tgrad.float32 and z.route == "cpu.zeros"
    assert np.array_equal(z.numpy().view(np.uint32), np.zeros((3, 4), np.uint32))
    e = tgrad.Tensor.from_numpy(np.ones((0, 5), np.float32)).matmul(
        tgrad.Tensor.from_numpy(np.ones((5, 2), np.float32)), out_dtype="float32")
    assert e.shape == (0, 2) and e.dtype == tgrad.float32 and e.numpy().shape == (0, 2)


def test_exact_values_and_the_method_spelling():
    a = tgrad.Tensor.from_numpy(np.array([[1.0, 2.0**-9], [3.0, 4.0]], np.float32))
    b = tgrad.Tensor.from_numpy(np.array([[1.0, 0.0], [1.0, 1.0]], np.float32))
    c = a.matmul(b, out_dtype=tgrad.float32)
    # 1 + 2^-9 is a float32 but not a bf16: the unrounded accumulator keeps it
    assert c.numpy().tolist() == [[1.0 + 2.0**-9, 2.0**-9], [7.0, 4.0]]
    assert (a @ b).numpy().astype(np.float32).tolist() == [[1.0, 2.0**-9], [7.0, 4.0]]
    assert a.matmul(b, out_dtype=tgrad.bfloat16).dtype == tgrad.bfloat16
    assert a.matmul(b).dtype == tgrad.bfloat16


def test_bad_out_dtypes_are_refused_before_any_allocation():
    a = tgrad.Tensor.from_numpy(np.ones((2, 3), np.float32))
    b = tgrad.Tensor.from_numpy(np.ones((3, 2), np.float32))
    before = (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes())
    with pytest.raises(errors.DtypeUnsupportedError, match="out_dtype"):
        tgrad.matmul(a, b, out_dtype=tgrad.int32)
    with pytest.raises(errors.DtypeUnsupportedError):
        tgrad.matmul(a, b, out_dtype="complex64")
    out = ffi.new("tgrad_tensor_t *", 12345)
    for code in (0, lib.TGRAD_DTYPE_F64, lib.TGRAD_DTYPE_I32, 99, -1):
        assert lib.tgrad_matmul_ex(a._h, b._h, code, out) == lib.TGRAD_ERR_DTYPE_UNSUPPORTED
        assert out[0] == 12345
    # the operand checks come first, as in tgrad_matmul
    assert lib.tgrad_matmul_ex(a._h, a._h, lib.TGRAD_DTYPE_F32, out) == lib.TGRAD_ERR_SHAPE_MISMATCH
    assert lib.tgrad_matmul_ex(a._h, b._h, lib.TGRAD_DTYPE_F32, ffi.NULL) == lib.TGRAD_ERR_INVALID_ARGUMENT
    assert (tgrad.live_tensors(), tgrad.live_buffers(), tgrad.live_bytes()) == before


def test_elementwise_ops_are_not_fused_into_a_float32_product():
    """Epilogues run on bf16 results: an op reading a float32 product either refuses float32
    operands (the elementwise ops that take bf16 only) or runs as its own step, and explain
    says why."""
    rng = np.random.default_rng(3)
    a = tgrad.Tensor.from_numpy(rng.standard_normal((8, 16)).astype(np.float32))
    b = tgrad.Tensor.from_numpy(rng.standard_normal((16, 8)).astype(np.float32))
    c = tgrad.matmul(a, b, out_dtype=tgrad.float32)
    try:
        y = tgrad.ops.relu(c)
    except errors.DtypeUnsupportedError:
        return  # float32 elementwise ops do not exist in this build
    plan = y.explain()
    assert "not fused into its reader" in plan and "float32" in plan, plan
    want = np.maximum(c.numpy(), 0)
    assert np.array_equal(y.numpy().astype(np.float32), want.astype(y.numpy().dtype).astype(np.float32))


def test_float32_on_a_gpu_device_gives_the_cpu_accumulators(opencl_device):
    """A float32 result on a GPU device (tests/python/test_gpu_matmul_f32.py has the rosters)."""
    x = np.arange(16, dtype=np.float32).reshape(4, 4) / 7
    with tgrad.Tensor.from_numpy(x, device="opencl") as a, tgrad.Tensor.from_numpy(x) as h:
        got = tgrad.matmul(a, a, out_dtype=tgrad.float32)
        assert got.device == "opencl" and got.dtype == tgrad.float32
        assert np.array_equal(got.numpy().view(np.uint32), tgrad.matmul(h, h, out_dtype=tgrad.float32).numpy().view(np.uint32))
        assert (a @ a).dtype == tgrad.bfloat16  # bf16 stays the default


def test_a_float32_product_renders_its_accumulators():
    """tgrad.render shows what a GPU runs: a float32 product's kernel stores the accumulators'
    bits (uint c), its bf16 twin the rounded values (ushort c)."""
    from tgrad import render

    a = tgrad.Tensor.from_numpy(np.ones((4, 4), np.float32))
    f32 = render.render_tensor(tgrad.matmul(a, a, out_dtype=tgrad.float32)).source
    assert "uint *c" in f32 and "tg_store_bf16(acc)" not in f32
    assert "ushort *c" in render.render_tensor(a @ a).source
