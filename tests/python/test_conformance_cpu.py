"""libtgrad's CPU matmul against the oracle, bit for bit, on the "ci" roster.

Each case builds its operands through real tgrad views (``.T``, ``.permute``, slicing with steps
and negative steps, ``.reshape``, ``.expand``) and the reference through the same numpy views,
then compares the output bits with ``conformance.oracle.matmul_bits``. Every CPU kernel variant
this machine runs, and one thread as well as the default count, must give the same bytes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import pytest

from tgrad.conformance.oracle import matmul_bits
from tgrad.conformance.rosters import CONTRACT_EXAMPLES, build_operands, roster

import tgrad  # noqa: E402

CASES = roster("ci")


def _variants() -> list[str | None]:
    """Runnable CPU kernel variants by name; [None] when the binding cannot choose one."""
    if not hasattr(tgrad, "cpu_isas") or not hasattr(tgrad, "set_cpu_isa"):
        return [None]
    return [name for name, runnable in tgrad.cpu_isas().items() if runnable] or [None]


def _configurations():
    """(isa, threads) pairs; the default variant at the default thread count comes first."""
    default_threads = tgrad.num_threads()
    counts = [default_threads] + ([1] if default_threads != 1 else [])
    return [(isa, t) for isa in _variants() for t in counts]


@pytest.fixture(autouse=True)
def _restore_runtime_settings():
    threads = tgrad.num_threads()
    isa = tgrad._cpu_isa_setting() if hasattr(tgrad, "_cpu_isa_setting") else "auto"
    yield
    tgrad.set_num_threads(threads)
    if hasattr(tgrad, "set_cpu_isa"):
        tgrad.set_cpu_isa(isa)


def _describe(got: np.ndarray, want: np.ndarray, a_bits: np.ndarray, b_bits: np.ndarray) -> str:
    bad = np.argwhere(got != want)
    lines = [f"{len(bad)} of {want.size} outputs differ"]
    for i, j in bad[:5]:
        lines.append(f"  C[{i},{j}]: got 0x{int(got[i, j]):04x}, want 0x{int(want[i, j]):04x}")
    if len(bad):
        i, j = bad[0]
        k = a_bits.shape[1]
        if k <= 16:
            row = " ".join(f"{int(v):04x}" for v in a_bits[i])
            col = " ".join(f"{int(v):04x}" for v in b_bits[:, j])
            lines.append(f"  a[{i},:] = {row}\n  b[:,{j}] = {col}")
    return "\n".join(lines)


def _run(a_tensor, b_tensor) -> np.ndarray:
    return (a_tensor @ b_tensor).numpy().view(np.uint16)


def _operands(case):
    """(tgrad a, tgrad b, a bits, b bits, oracle bits) for a roster case, built through views."""
    a_base, b_base, view = build_operands(case)
    a_bits, b_bits = view(a_base, "a").view(np.uint16), view(b_base, "b").view(np.uint16)
    a_t = view(tgrad.Tensor.from_numpy(a_base), "a")
    b_t = view(tgrad.Tensor.from_numpy(b_base), "b")
    return a_t, b_t, a_bits, b_bits, matmul_bits(a_bits, b_bits)


def _check_every_configuration(case, a_t, b_t, a_bits, b_bits, want, label=""):
    for isa, threads in _configurations():
        if isa is not None:
            tgrad.set_cpu_isa(isa)
        tgrad.set_num_threads(threads)
        got = _run(a_t, b_t)
        assert got.shape == want.shape
        if not np.array_equal(got, want):
            pytest.fail(f"{case.id} [isa={isa or tgrad.cpu_isa()}, threads={threads}{label}]: "
                        + _describe(got, want, np.asarray(a_bits), np.asarray(b_bits)))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_matches_oracle_bit_for_bit(case):
    a_t, b_t, a_bits, b_bits, want = _operands(case)
    assert a_t.shape == (case.m, case.k) and b_t.shape == (case.k, case.n)
    # The tgrad views must hold the same elements as the numpy views.
    assert np.array_equal(a_t.numpy().view(np.uint16), a_bits)
    assert np.array_equal(b_t.numpy().view(np.uint16), b_bits)
    _check_every_configuration(case, a_t, b_t, a_bits, b_bits, want)


# Small caps send every case through the shared-chunk path with many row/column chunks and K
# panels; the second packs A where the variant would read it in place.
BLOCKINGS = [(16 << 10, 64, 0), (4 << 10, 8, 0), (16 << 10, 64, 1)]
LARGE_CASES = [c for c in CASES if c.m * c.k * c.n >= 4096]


@pytest.mark.slow
@pytest.mark.parametrize("blocking", BLOCKINGS, ids=[f"chunk{b[0]}-panel{b[1]}-flags{b[2]}" for b in BLOCKINGS])
def test_shared_chunk_path_matches_oracle(blocking):
    from tgrad._ffi import lib

    assert lib.tgrad_debug_cpu_blocking(*blocking) == 0
    try:
        for case in LARGE_CASES:
            _check_every_configuration(case, *_operands(case), label=f", blocking={blocking}")
    finally:
        lib.tgrad_debug_cpu_blocking(0, 0, 0)


@pytest.mark.parametrize("example", CONTRACT_EXAMPLES, ids=[e.id for e in CONTRACT_EXAMPLES])
def test_contract_example(example):
    a_bits, b_bits = example.bits()
    a_t = tgrad.Tensor.from_bf16_bits(a_bits)
    b_t = tgrad.Tensor.from_bf16_bits(b_bits)
    for isa, threads in _configurations():
        if isa is not None:
            tgrad.set_cpu_isa(isa)
        tgrad.set_num_threads(threads)
        with tgrad.matmul_order(example.order):
            got = int(_run(a_t, b_t)[0, 0])
        assert got == example.expected, (
            f"{example.id} [isa={isa or tgrad.cpu_isa()}, threads={threads}]: got 0x{got:04x}, "
            f"want 0x{example.expected:04x} ({example.why})")


VIEW_CASES = [c for c in CASES if c.family == "views"]


@pytest.mark.parametrize("case", VIEW_CASES, ids=[c.id for c in VIEW_CASES])
def test_view_operands_share_their_base_buffer(case):
    a_base, b_base, view = build_operands(case)
    for which, base in (("a", a_base), ("b", b_base)):
        base_t = tgrad.Tensor.from_numpy(base)
        viewed = view(base_t, which)
        assert viewed.shares_buffer(base_t), f"{case.id}: operand {which} was copied"


# Products at or above libtgrad's single-thread threshold (cpu/frame.h SMALL_MNK: 2^21
# multiply-adds) split into tasks over the pool; thread counts that do not divide the row and
# column blocks evenly (3, 5) leave uneven last tasks that the default count (2 on CI) and one
# thread never exercise.
SMALL_MNK = 1 << 21
THREADED_CASES = [c for c in CASES if c.m * c.k * c.n >= SMALL_MNK]


def test_roster_has_products_above_the_single_thread_threshold():
    assert len(THREADED_CASES) >= 5, [c.id for c in THREADED_CASES]
    assert {c.family for c in THREADED_CASES} >= {"sentinel", "odd_prime"}


def _check_every_variant_at(threads, label, a_t, b_t, a_bits, b_bits, want):
    for isa in _variants():
        if isa is not None:
            tgrad.set_cpu_isa(isa)
        tgrad.set_num_threads(threads)
        got = _run(a_t, b_t)
        if not np.array_equal(got, want):
            pytest.fail(f"{label} [isa={isa or tgrad.cpu_isa()}, threads={threads}]: "
                        + _describe(got, want, np.asarray(a_bits), np.asarray(b_bits)))


@pytest.mark.parametrize("threads", [3, 5])
@pytest.mark.parametrize("case", THREADED_CASES, ids=[c.id for c in THREADED_CASES])
def test_odd_thread_counts_above_the_threshold_match_oracle(case, threads):
    _check_every_variant_at(threads, case.id, *_operands(case))


@pytest.mark.parametrize("threads", [3])
@pytest.mark.parametrize("shape", [(1, 2048, 1024), (1024, 2048, 1), (12, 512, 1024), (40, 256, 1024)],
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else str(s))
def test_streamed_routes_with_three_threads_match_oracle(shape, threads):
    """The one-row (rowvec) and few-rows (skinny) routes split their columns into strips per thread:
    with 3 threads above the threshold every strip must still be written."""
    m, k, n = shape
    rng = np.random.default_rng(m * 7 + n)
    a_bits = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16).view(np.uint16)
    b_bits = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16).view(np.uint16)
    want = matmul_bits(a_bits, b_bits)
    a_t, b_t = tgrad.Tensor.from_bf16_bits(a_bits), tgrad.Tensor.from_bf16_bits(b_bits)
    _check_every_variant_at(threads, f"{m}x{k}x{n}", a_t, b_t, a_bits, b_bits, want)
