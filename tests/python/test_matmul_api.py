"""matmul through the Python API: operators, laziness, shapes, refusals, and exact results.

Exact-by-construction inputs (small integers: every product and partial sum is an integer below
2^8, so any summation order gives the same exact value) are compared bitwise with numpy's float64
matmul. One test compares random normal data and views with the bit-exact oracle of the numerics
contract (conformance.oracle).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import tgrad
from tgrad import Tensor, errors

BF16 = ml_dtypes.bfloat16


def small_ints(rng: np.random.Generator, shape: tuple[int, ...], k: int) -> np.ndarray:
    """Integers whose products summed over k terms stay exact in bf16 (|sum| <= 256)."""
    bound = max(1, int((256 / max(k, 1)) ** 0.5))
    return rng.integers(-bound, bound + 1, size=shape).astype(np.float32)


def exact_reference_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # + 0.0 turns -0 into +0: the contract's accumulator starts at +0.0.
    c = a.astype(np.float64) @ b.astype(np.float64) + 0.0
    assert np.all(np.abs(c) <= 256)
    return c.astype(np.float32).astype(BF16).view(np.uint16)


def bits_of(t: Tensor) -> np.ndarray:
    return t.numpy().view(np.uint16)


@pytest.mark.parametrize(
    "m,k,n",
    [(1, 1, 1), (4, 4, 4), (8, 8, 4), (4, 32, 4), (6, 32, 6), (4, 4, 32), (3, 5, 7), (17, 1, 9),
     (33, 64, 65), (64, 128, 96), (127, 31, 129)],
)
def test_exact_small_integer_products(rng: np.random.Generator, m: int, k: int, n: int) -> None:
    a, b = small_ints(rng, (m, k), k), small_ints(rng, (k, n), k)
    c = Tensor.from_numpy(a) @ Tensor.from_numpy(b)
    assert c.shape == (m, n)
    np.testing.assert_array_equal(bits_of(c), exact_reference_bits(a, b))


def test_three_spellings_give_the_same_bytes(rng: np.random.Generator) -> None:
    a = Tensor.from_numpy(rng.standard_normal((9, 14)))
    b = Tensor.from_numpy(rng.standard_normal((14, 5)))
    expected = (a @ b).to_bytes()
    assert a.matmul(b).to_bytes() == expected
    assert tgrad.matmul(a, b).to_bytes() == expected


def test_result_is_lazy_until_read_or_realized() -> None:
    a = Tensor.from_numpy(np.ones((3, 4), np.float32))
    c = a @ a.T
    assert not c.is_realized
    assert c.shape == (3, 3) and c.dtype == "bfloat16"  # properties do not compute
    assert not c.is_realized
    assert c.realize() is c
    assert c.is_realized
    assert c.realize() is c
    d = a @ a.T
    assert d.numpy(np.float32).tolist() == [[4.0] * 3] * 3
    assert d.is_realized


def test_operands_may_be_released_before_the_result_is_read(rng: np.random.Generator) -> None:
    x, y = small_ints(rng, (5, 6), 6), small_ints(rng, (6, 7), 6)
    a, b = Tensor.from_numpy(x), Tensor.from_numpy(y)
    c = a.T.T @ b[:, ::-1]
    a.release()
    b.release()
    np.testing.assert_array_equal(bits_of(c), exact_reference_bits(x, y[:, ::-1]))


def test_views_as_operands_exact(rng: np.random.Generator) -> None:
    x, y = small_ints(rng, (12, 10), 10), small_ints(rng, (10, 12), 10)
    a, b = Tensor.from_numpy(x), Tensor.from_numpy(y)
    cases = [
        (a.T, b.T, x.T, y.T),
        (a[::2], b, x[::2], y),
        (a[:, ::-2], b[::-2], x[:, ::-2], y[::-2]),
        (a[1:4, 2:], b[2:, 3:5], x[1:4, 2:], y[2:, 3:5]),
        (a[:1].expand(5, 10), b, np.broadcast_to(x[:1], (5, 10)), y),
        (a, b[:, :1].expand(10, 6), x, np.broadcast_to(y[:, :1], (10, 6))),
        (a.reshape(10, 12).T, b.T.reshape(10, 12), x.reshape(10, 12).T, y.T.reshape(10, 12)),
    ]
    for ta, tb, na, nb in cases:
        np.testing.assert_array_equal(bits_of(ta @ tb), exact_reference_bits(na, nb))


def test_chained_lazy_products(rng: np.random.Generator) -> None:
    x = rng.integers(-1, 2, size=(4, 4)).astype(np.float32)
    a = Tensor.from_numpy(x)
    c = (a @ a) @ a.T  # a pending result as an operand
    xx = x.astype(np.float64)
    np.testing.assert_array_equal(c.numpy(np.float32), (xx @ xx) @ xx.T + 0.0)


# ---- empty shapes ------------------------------------------------------------------------------
@pytest.mark.parametrize("m,k,n", [(0, 3, 4), (3, 4, 0), (0, 0, 0), (0, 5, 0)])
def test_empty_m_or_n_gives_an_empty_result(m: int, k: int, n: int) -> None:
    c = Tensor.from_numpy(np.ones((m, k), np.float32)) @ Tensor.from_numpy(np.ones((k, n), np.float32))
    assert c.shape == (m, n) and c.size == 0
    assert c.numpy().shape == (m, n)
    assert c.to_bytes() == b""


def test_k_zero_gives_positive_zeros() -> None:
    c = Tensor.from_numpy(np.ones((3, 0), np.float32)) @ Tensor.from_numpy(np.ones((0, 4), np.float32))
    assert c.shape == (3, 4)
    np.testing.assert_array_equal(bits_of(c), np.zeros((3, 4), np.uint16))


# ---- refusals ----------------------------------------------------------------------------------
def test_inner_dimension_mismatch_names_both_shapes() -> None:
    a = Tensor.from_numpy(np.zeros((32, 768), np.float32))
    b = Tensor.from_numpy(np.zeros((512, 768), np.float32))
    start = tgrad.live_tensors()
    with pytest.raises(errors.ShapeMismatchError) as info:
        a @ b
    assert "matmul: [32, 768] @ [512, 768]: inner dimensions 768 and 512 differ" in str(info.value)
    assert info.value.code == "shape_mismatch"
    assert isinstance(info.value, ValueError)
    assert tgrad.live_tensors() == start  # refused before anything was made


@pytest.mark.parametrize("a_shape,b_shape", [((), (1, 1)), ((1, 1), ()), ((), ())])
def test_operands_need_a_dimension(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    # other ranks follow torch.matmul (tests/python/test_matmul_batched.py)
    a = Tensor.from_numpy(np.zeros(a_shape, np.float32))
    b = Tensor.from_numpy(np.zeros(b_shape, np.float32))
    with pytest.raises(errors.RankMismatchError):
        a @ b


def test_non_tensor_operands() -> None:
    a = Tensor.from_numpy(np.ones((2, 2), np.float32))
    x = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError):
        a @ x
    with pytest.raises(TypeError):
        x @ a  # numpy must not quietly convert the Tensor
    with pytest.raises(TypeError):
        a @ 3  # type: ignore[operator]
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.matmul(a, "x")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):
        tgrad.matmul(x, a)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):
        a.matmul(x)  # type: ignore[arg-type]


def test_released_operand_is_an_invalid_handle() -> None:
    a = Tensor.from_numpy(np.ones((2, 2), np.float32))
    b = Tensor.from_numpy(np.ones((2, 2), np.float32))
    b.release()
    with pytest.raises(errors.InvalidHandleError):
        a @ b


# ---- numerics through the API ------------------------------------------------------------------
def test_nan_is_confined_to_its_row_and_column() -> None:
    x = np.ones((4, 3), np.float32)
    y = np.ones((3, 5), np.float32)
    x[1, 2] = np.nan
    y[0, 3] = np.inf
    c = bits_of(Tensor.from_numpy(x) @ Tensor.from_numpy(y))
    nan_mask = (c & 0x7F80 == 0x7F80) & (c & 0x7F != 0)
    expected_nan = np.zeros((4, 5), bool)
    expected_nan[1, :] = True
    assert (nan_mask == expected_nan).all()
    assert (c[nan_mask] == 0x7FC0).all()  # canonical NaN
    assert (c[[0, 2, 3], 3] == 0x7F80).all()  # +inf in column 3 elsewhere


def test_results_do_not_depend_on_thread_count_or_cpu_variant(rng: np.random.Generator) -> None:
    a = rng.standard_normal((70, 300)).astype(np.float32)
    b = rng.standard_normal((300, 90)).astype(np.float32)

    def run() -> bytes:
        return (Tensor.from_numpy(a) @ Tensor.from_numpy(b)).to_bytes()

    before = tgrad.num_threads()
    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_num_threads(1)
        one = run()
        tgrad.set_num_threads(2)
        assert run() == one
        tgrad.set_num_threads(max(before, 3))
        assert run() == one
        for name, available in tgrad.cpu_isas().items():
            if available:
                tgrad.set_cpu_isa(name)
                assert run() == one, name
    finally:
        tgrad.set_num_threads(before)
        tgrad.set_cpu_isa(isa_before)


def test_a_shared_lazy_result_realizes_once_across_threads(rng: np.random.Generator) -> None:
    x, y = small_ints(rng, (40, 50), 50), small_ints(rng, (50, 30), 50)
    c = Tensor.from_numpy(x) @ Tensor.from_numpy(y)
    results: list[bytes] = []
    failures: list[BaseException] = []

    def read() -> None:
        try:
            results.append(c.to_bytes())
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=read) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    expected = exact_reference_bits(x, y).astype("<u2").tobytes()
    assert results == [expected] * 6


def test_random_normal_and_views_match_the_oracle(bf16_bits: Callable[..., np.ndarray]) -> None:
    from tgrad.conformance.oracle import matmul_bits

    xa, xb = bf16_bits(48, 37), bf16_bits(37, 48)
    a, b = Tensor.from_bf16_bits(xa), Tensor.from_bf16_bits(xb)
    cases = [
        ("plain", a, b, xa, xb),
        ("a.T b.T", b.T, a.T, xb.T, xa.T),
        ("a.T", a.T[:, :37], a[:37], xa.T[:, :37], xa[:37]),
        ("step 2", a[::2], b, xa[::2], xb),
        ("negative steps", a[::-1, ::-1], b[::-1, ::-3], xa[::-1, ::-1], xb[::-1, ::-3]),
        ("expanded b", a, b[:, 5:6].expand(37, 20), xa, np.broadcast_to(xb[:, 5:6], (37, 20))),
        ("expanded a", a[3:4].expand(9, 37), b, np.broadcast_to(xa[3:4], (9, 37)), xb),
        ("odd K", a[:, 1:36], b[2:37], xa[:, 1:36], xb[2:37]),
    ]
    for name, ta, tb, na, nb in cases:
        got = bits_of(ta @ tb)
        np.testing.assert_array_equal(got, matmul_bits(na, nb), err_msg=name)


MIB = 1 << 20
#: The CPU kernels' scratch bound (docs/performance.md, "Memory"): on the calling thread a chunk of
#: packed B and one of packed A (8 MiB each, plus a tile), fp32 accumulators for K past one panel
#: (16 MiB), each rounded up to 2 MiB pages; per thread a per-block task's panels and tile (under
#: 4 MiB); and 16 packed rows of A, 64 bytes per element of K, on the one-row and few-rows paths.
SCRATCH_CALLER = 40 * MIB
SCRATCH_PER_THREAD = 4 * MIB
SCRATCH_PER_K = 64


def _every_cpu_path(rng: np.random.Generator) -> int:
    """One product per CPU path (one row, one column, few rows, per-block tasks, chunks over two
    K panels, chunks in one panel, small K) and one whose A (96 MiB) would not fit the bound if
    it were packed whole; returns the largest K."""
    shapes = [(1, 9000, 700), (700, 9000, 1), (12, 9000, 600), (40, 4000, 1300), (300, 3000, 700),
              (1100, 5000, 1500), (2100, 2048, 2100), (4000, 64, 4000), (6000, 8192, 100)]
    for m, k, n in shapes:
        a = Tensor.from_bf16_bits(rng.integers(0x3c00, 0x4000, (m, k), dtype=np.uint16))
        b = Tensor.from_bf16_bits(rng.integers(0x3c00, 0x4000, (k, n), dtype=np.uint16))
        (a @ b).realize()
    return max(k for _, k, _ in shapes)


# The SIMD variants (the portable one shares their frame, at a speed too slow for these sizes).
SIMD_VARIANTS = [name for name, ok in tgrad.cpu_isas().items() if ok and name != "portable"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", SIMD_VARIANTS)
def test_cpu_scratch_is_bounded_by_the_blocking_and_reused(rng: np.random.Generator,
                                                           variant: str) -> None:
    """Packing buffers and accumulator tiles grow to the largest block a thread has worked on and
    are reused: a second round of the same products holds no more, and what is held stays under
    a bound set by the blocking constants, whatever M*N*K was (up to 2^33 here)."""
    threads = tgrad.num_threads()
    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa(variant)
        tgrad.set_num_threads(1)  # the calling thread only: which worker runs which block varies
        _every_cpu_path(rng)
        held = tgrad.cpu_scratch_bytes()
        _every_cpu_path(rng)
        assert tgrad.cpu_scratch_bytes() == held  # reused: nothing grew
        tgrad.set_num_threads(threads)
        k_max = _every_cpu_path(rng)
    finally:
        tgrad.set_num_threads(threads)
        tgrad.set_cpu_isa(isa_before)
    held = tgrad.cpu_scratch_bytes()
    assert 0 < held <= SCRATCH_CALLER + threads * SCRATCH_PER_THREAD + SCRATCH_PER_K * k_max


# ---- the automatic variant choice ------------------------------------------------------------


def _set_rates(rates: list[float] | None) -> None:
    from tgrad._ffi import ffi, lib

    if rates is None:
        assert lib.tgrad_debug_cpu_isa_rates(ffi.NULL, 0) == 0
    else:
        assert lib.tgrad_debug_cpu_isa_rates(ffi.new("double[]", rates), len(rates)) == 0
    tgrad.set_cpu_isa("auto")


def _set_identity(vendor: str | None, family: int = 0) -> None:
    from tgrad._ffi import ffi, lib

    assert lib.tgrad_debug_cpu_identity(ffi.NULL if vendor is None else vendor.encode(), family) == 0
    tgrad.set_cpu_isa("auto")


def _choice() -> tuple[str, str, bool]:
    return tgrad.cpu_isa(), tgrad.cpu_stream_isa(), tgrad.cpu_isa_forced()


def test_auto_takes_a_clearly_faster_packed_kernel_and_keeps_streaming_routes(
        bf16_bits: Callable[..., np.ndarray]) -> None:
    """Where another SIMD variant's core instruction does >= sqrt(2) times the flops of the most
    capable one's (avx512f's FMA against vdpbf16ps on Intel Xeons), packed products take it and
    one-row and few-row products keep the most capable variant's streaming routes; bytes are the
    oracle's either way. The rates are set through the testing aid, so this runs on any CPU with
    two SIMD variants. The pairwise order's routes: block32's packed kernel is AMX or the variant's
    own (test_matmul_order.py)."""
    from tgrad.conformance.oracle import matmul_bits

    if len(SIMD_VARIANTS) < 2:
        pytest.skip(f"needs two SIMD variants; this CPU runs {SIMD_VARIANTS or 'none'}")
    names = list(tgrad.cpu_isas())
    first, second = SIMD_VARIANTS[0], SIMD_VARIANTS[1]
    rates = [0.0] * len(names)
    isa_before, order_before = tgrad._cpu_isa_setting(), tgrad.get_matmul_order()
    try:
        tgrad.set_matmul_order("pairwise")
        rates[names.index(first)], rates[names.index(second)] = 100e9, 140e9  # 1.40x: not enough
        _set_rates(rates)
        assert _choice() == (first, first, False)
        assert tgrad.cpu_isa_reason().startswith("rates set by tgrad_debug_cpu_isa_rates")

        rates[names.index(second)] = 200e9
        _set_rates(rates)
        assert _choice() == (second, first, False)
        paths: set[str] = set()
        for m, k, n in [(1, 300, 70), (5, 300, 70), (70, 300, 1), (40, 300, 70), (33, 129, 65)]:
            xa, xb = bf16_bits(m, k), bf16_bits(k, n)
            c = Tensor.from_bf16_bits(xa) @ Tensor.from_bf16_bits(xb)
            route = c.route
            isa, path = route.split(".")[1:]
            assert isa == (first if path in ("rowvec", "skinny") else second), route
            paths.add(path)
            np.testing.assert_array_equal(bits_of(c), matmul_bits(xa, xb, order="pairwise"), err_msg=route)
        assert "gemm" in paths and len(paths) >= 2, paths

        tgrad.set_cpu_isa(second)  # forcing one variant uses it for every route
        assert _choice() == (second, second, True)
        one_row = Tensor.from_bf16_bits(bf16_bits(1, 300)) @ Tensor.from_bf16_bits(bf16_bits(300, 70))
        assert one_row.route.split(".")[1] == second
        _set_rates(None)
        assert tgrad.cpu_stream_isa() == first and not tgrad.cpu_isa_forced()
    finally:
        _set_rates(None)
        tgrad.set_cpu_isa(isa_before)
        tgrad.set_matmul_order(order_before)


def test_the_automatic_choice_is_a_function_of_the_rules_inputs() -> None:
    """The same rates give the same choice, every time it is made; the threshold is sqrt(2)
    (halfway, in ratio, between the 1x and 2x that cores show), on either side of it by 1%."""
    if len(SIMD_VARIANTS) < 2:
        pytest.skip(f"needs two SIMD variants; this CPU runs {SIMD_VARIANTS or 'none'}")
    names = list(tgrad.cpu_isas())
    first, second = SIMD_VARIANTS[0], SIMD_VARIANTS[1]
    isa_before = tgrad._cpu_isa_setting()
    try:
        for ratio in (0.5, 1.0, 1.3, 1.40, 1.42, 2.0, 4.0):
            rates = [0.0] * len(names)
            rates[names.index(first)], rates[names.index(second)] = 50e9, ratio * 50e9
            want = (second if ratio >= 2 ** 0.5 else first, first, False)
            for _ in range(3):
                _set_rates(rates)
                assert _choice() == want, ratio
    finally:
        _set_rates(None)
        tgrad.set_cpu_isa(isa_before)


@pytest.mark.skipif(not all(tgrad.cpu_isas().get(v) for v in ("avx512bf16", "avx512f")),
                    reason="the rule's table is about CPUs that run both avx512bf16 and avx512f")
@pytest.mark.parametrize("vendor,family,want,reason", [
    ("GenuineIntel", 6, "avx512f", "rule: an Intel family-6 core"),
    ("AuthenticAMD", 0x19, "avx512bf16", "rule: an AMD Zen 4 core"),
    ("AuthenticAMD", 0x1a, "avx512bf16", "rule: an AMD Zen 5 core"),
    ("HygonGenuine", 0x18, None, "measured: "),  # not in the table: measured once per process
])
def test_the_rule_reads_cpuid_vendor_and_family(vendor: str, family: int, want: str | None, reason: str) -> None:
    """On a CPU with AVX512-BF16 the table decides by CPUID vendor and family: Intel's FMA does
    twice vdpbf16ps's flops, AMD Zen 4 and 5's half; streaming routes keep avx512bf16."""
    isa_before = tgrad._cpu_isa_setting()
    try:
        _set_identity(vendor, family)
        assert tgrad.cpu_isa_reason().startswith(reason), tgrad.cpu_isa_reason()
        assert tgrad.cpu_stream_isa() == "avx512bf16" and not tgrad.cpu_isa_forced()
        if want is not None:
            assert tgrad.cpu_isa() == want
        else:
            assert tgrad.cpu_isa() in ("avx512bf16", "avx512f")
    finally:
        _set_identity(None)
        tgrad.set_cpu_isa(isa_before)


def test_two_processes_pick_the_same_variants() -> None:
    """Two interpreters started together (so that they compete for the cores, as a measurement
    would) make the automatic choice: the same variants, for the same reason, as this process."""
    import os
    import subprocess
    import sys

    code = "import tgrad; print(tgrad.cpu_isa(), tgrad.cpu_stream_isa(), tgrad.cpu_isa_forced(), tgrad.cpu_isa_reason())"
    env = {k: v for k, v in os.environ.items() if k != "TGRAD_CPU_ISA"}
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
                for _ in range(2)]
    lines = [child.communicate(timeout=120)[0].strip() for child in children]
    assert all(child.returncode == 0 for child in children)
    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa("auto")
        mine = f"{tgrad.cpu_isa()} {tgrad.cpu_stream_isa()} False {tgrad.cpu_isa_reason()}"
    finally:
        tgrad.set_cpu_isa(isa_before)
    assert lines == [mine, mine]


@pytest.mark.parametrize("rates,count", [(None, 3), ([1.0], -1), ([-1.0], None), ([float("nan")], None)])
def test_the_rates_testing_aid_refuses_bad_input(rates: list[float] | None, count: int | None) -> None:
    from tgrad._ffi import ffi, lib
    from tgrad.errors import _check

    n = len(tgrad.cpu_isas())
    if count == -1:  # one rate too many
        rates, count = [1.0] * (n + 1), n + 1
    if rates is not None and count is None:  # a bad value among the right number of rates
        rates, count = rates + [1.0] * (n - 1), n
    arg = ffi.NULL if rates is None else ffi.new("double[]", rates)
    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa("auto")
        before = _choice(), tgrad.cpu_isa_reason()
        with pytest.raises(errors.InvalidArgumentError):
            _check(lib.tgrad_debug_cpu_isa_rates(arg, count))
        tgrad.set_cpu_isa("auto")
        assert (_choice(), tgrad.cpu_isa_reason()) == before  # nothing changed
    finally:
        tgrad.set_cpu_isa(isa_before)


@pytest.mark.parametrize("vendor,family", [("GenuineIntel!", 6), ("GenuineIntel", -1)])
def test_the_identity_testing_aid_refuses_bad_input(vendor: str, family: int) -> None:
    from tgrad._ffi import lib
    from tgrad.errors import _check

    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa("auto")
        before = _choice(), tgrad.cpu_isa_reason()
        with pytest.raises(errors.InvalidArgumentError):
            _check(lib.tgrad_debug_cpu_identity(vendor.encode(), family))
        tgrad.set_cpu_isa("auto")
        assert (_choice(), tgrad.cpu_isa_reason()) == before  # nothing changed
    finally:
        tgrad.set_cpu_isa(isa_before)


@pytest.mark.parametrize("variant", SIMD_VARIANTS)
def test_outputs_with_rows_4k_apart_bypass_the_caches_exactly(variant: str,
                                                              bf16_bits: Callable[..., np.ndarray]) -> None:
    """N = 2048 puts output rows 4 KiB apart; from 1 MiB of output the kernels write whole lines
    past the caches (non-temporal stores). Bytes are the oracle's, over two K panels too."""
    from tgrad.conformance.oracle import matmul_bits

    xa, xb = bf16_bits(300, 1100), bf16_bits(1100, 2048)
    isa_before = tgrad._cpu_isa_setting()
    try:
        tgrad.set_cpu_isa(variant)
        got = bits_of(Tensor.from_bf16_bits(xa) @ Tensor.from_bf16_bits(xb))
    finally:
        tgrad.set_cpu_isa(isa_before)
    np.testing.assert_array_equal(got, matmul_bits(xa, xb))
