"""The MSL emulator itself (tests/msl_emu): hand-written kernels check that it models what the
tier relies on — builtins, scalar arguments, threadgroup memory shared and poisoned, barriers,
fiber orders, simdgroup matrices and simd_* collectives with their uniformity checks, bfloat
rounding, guard pages, stack overflow, and the MSL subset it accepts (docs/msl-subset.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tgrad.conformance.oracle import f32_to_bf16_bits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from msl_emu.driver import CompileError, Emulator, EmuError, SubsetError, find_cxx, translate  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_cxx() is None, reason="no C++ compiler for the MSL emulator")]

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


@pytest.fixture(scope="module")
def emu() -> Emulator:
    return Emulator()


def launch(emu: Emulator, body: str, grid, tg, buffers, readonly=None, **options):
    kernel = emu.compile(HEAD + body)
    return emu.run(kernel, grid, tg, buffers, readonly or [False] * len(buffers), **options)


def test_builtins_follow_metal_definitions(emu: Emulator) -> None:
    src = """
kernel void ids(device uint *out [[buffer(0)]],
                uint3 gpos [[thread_position_in_grid]],
                uint3 tg [[threadgroup_position_in_grid]],
                uint3 lpos [[thread_position_in_threadgroup]],
                uint li [[thread_index_in_threadgroup]],
                uint lane [[thread_index_in_simdgroup]],
                uint sg [[simdgroup_index_in_threadgroup]],
                uint3 tpt [[threads_per_threadgroup]])
{
    const uint linear = (gpos.z * 4 + gpos.y) * 6 + gpos.x;  // grid of 6 x 4 x 2 threads
    device uint *o = out + linear * 9;
    o[0] = tg.x; o[1] = tg.y; o[2] = tg.z; o[3] = lpos.x; o[4] = lpos.y; o[5] = li; o[6] = lane; o[7] = sg;
    o[8] = tpt.x * tpt.y * tpt.z;
}
"""
    out = launch(emu, src, (2, 1, 2), (3, 4, 1), [np.zeros(6 * 4 * 2 * 9, np.uint32)])[0].reshape(2, 4, 6, 9)
    z, y, x = np.meshgrid(range(2), range(4), range(6), indexing="ij")
    li = y * 3 + x % 3
    want = np.stack([x // 3, y // 4, z, x % 3, y, li, li % 32, li // 32, np.full_like(x, 12)], axis=-1)
    assert np.array_equal(out, want)


def test_scalar_arguments_and_buffer_indices(emu: Emulator) -> None:
    src = """
kernel void axpy(device float *y [[buffer(2)]], constant float &alpha [[buffer(0)]],
                 device const float *x [[buffer(1)]], uint i [[thread_position_in_grid]])
{
    y[i] = fma(alpha, x[i], y[i]);
}
"""
    x = np.arange(64, dtype=np.float32)
    y = np.ones(64, np.float32)
    out = launch(emu, src, (2, 1, 1), (32, 1, 1), [np.float32([2.5]), x, y], [True, True, False])
    assert np.array_equal(out[2], 2.5 * x + 1)


def test_threadgroup_memory_is_shared_and_poisoned_at_every_threadgroup_start(emu: Emulator) -> None:
    src = """
kernel void tgmem(device uint *seen [[buffer(0)]], device uint *shared_sum [[buffer(1)]],
                  uint3 tg [[threadgroup_position_in_grid]], uint li [[thread_index_in_threadgroup]])
{
    threadgroup uint slots[64];
    seen[tg.x * 64 + li] = slots[li];      // before anyone wrote: the poison
    slots[li] = li + 1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (li == 0) {
        uint s = 0;
        for (int i = 0; i < 64; i++)
            s += slots[i];
        shared_sum[tg.x] = s;
    }
}
"""
    # one worker runs all 5 threadgroups in turn: each must see fresh poison, not the last values
    seen, sums = launch(emu, src, (5, 1, 1), (64, 1, 1), [np.zeros(5 * 64, np.uint32), np.zeros(5, np.uint32)],
                        workers=1)
    assert (seen == 0xFFFFFFFF).all()
    assert (sums == 64 * 65 // 2).all()


def test_fiber_orders_are_forward_reverse_and_seeded_shuffles(emu: Emulator) -> None:
    src = """
kernel void order(device uint *counter [[buffer(0)]], device uint *when [[buffer(1)]],
                  uint li [[thread_index_in_threadgroup]])
{
    const uint t = counter[0];   // fibers switch only at barriers: this is the run order
    counter[0] = t + 1;
    when[li] = t;
}
"""
    def run(order: str, seed: int = 0) -> np.ndarray:
        return launch(emu, src, (1, 1, 1), (64, 1, 1), [np.zeros(1, np.uint32), np.zeros(64, np.uint32)],
                      order=order, seed=seed, workers=1)[1]

    assert np.array_equal(run("forward"), np.arange(64))
    assert np.array_equal(run("reverse"), np.arange(64)[::-1])
    a, b, c = run("shuffle", 1), run("shuffle", 1), run("shuffle", 2)
    assert np.array_equal(np.sort(a), np.arange(64)) and np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(64)) and not np.array_equal(a, c)


def test_simdgroup_matrices_load_transpose_multiply_and_store(emu: Emulator) -> None:
    src = """
kernel void mma(device const float *a [[buffer(0)]], device const float *b [[buffer(1)]],
                device float *c [[buffer(2)]], uint li [[thread_index_in_threadgroup]])
{
    threadgroup float at[8][12];
    threadgroup float bt[8][8];
    threadgroup float ct[8][8];
    for (uint i = li; i < 96; i += 32)
        at[i / 12][i % 12] = a[i];
    for (uint i = li; i < 64; i += 32)
        bt[i / 8][i % 8] = b[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 ma;
    simdgroup_float8x8 mb;
    simdgroup_float8x8 mc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
    simdgroup_load(ma, &at[0][0], 12, ulong2(3, 0));       // columns 3..10 of an 8 x 12 block
    simdgroup_load(mb, &bt[0][0], 8, ulong2(0, 0), true);  // transposed
    simdgroup_multiply_accumulate(mc, ma, mb, mc);
    simdgroup_store(mc, &ct[0][0], 8);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = li; i < 64; i += 32)
        c[i] = ct[i / 8][i % 8];
}
"""
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 9, (8, 12)).astype(np.float32)
    b = rng.integers(-8, 9, (8, 8)).astype(np.float32)
    for mma in ("fma", "fma_reverse", "exact"):
        out = launch(emu, src, (1, 1, 1), (32, 1, 1), [a.ravel(), b.ravel(), np.zeros(64, np.float32)],
                     [True, True, False], mma=mma)[2].reshape(8, 8)
        assert np.array_equal(out, a[:, 3:11] @ b.T + 1)
    with pytest.raises(EmuError, match="the mma model truncate is CUDA's"):  # tests/cuda_emu's model
        launch(emu, src, (1, 1, 1), (32, 1, 1), [a.ravel(), b.ravel(), np.zeros(64, np.float32)],
               [True, True, False], mma="truncate")


def test_simdgroup_matrices_need_a_full_simdgroup(emu: Emulator) -> None:
    src = """
kernel void partial(device float *y [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    threadgroup float t[8][8];
    t[li / 8][li % 8] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 m;
    simdgroup_load(m, &t[0][0], 8);
    simdgroup_store(m, y, 8);
}
"""
    launch(emu, src, (1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32)])  # two full simdgroups
    with pytest.raises(EmuError, match="simdgroup of 16 threads: simdgroup matrices need all 32 lanes"):
        launch(emu, src, (1, 1, 1), (48, 1, 1), [np.zeros(64, np.float32)])


SIMD = """
kernel void simd(device const float *x [[buffer(0)]], device float *out [[buffer(1)]],
                 uint li [[thread_index_in_threadgroup]], ushort lane [[thread_index_in_simdgroup]])
{
    const float v = x[li];
    out[li * 3 + 0] = simd_sum(v);
    out[li * 3 + 1] = simd_broadcast(v, BROADCAST_LANE);
    out[li * 3 + 2] = simd_shuffle(v, (ushort)(31 - lane));
}
"""


def test_simd_collectives(emu: Emulator) -> None:
    x = np.arange(64, dtype=np.float32)
    out = launch(emu, SIMD.replace("BROADCAST_LANE", "5"), (1, 1, 1), (64, 1, 1),
                 [x, np.zeros(192, np.float32)], [True, False])[1].reshape(64, 3)
    groups = x.reshape(2, 32)
    assert np.array_equal(out[:, 0], np.repeat(groups.sum(axis=1), 32))
    assert np.array_equal(out[:, 1], np.repeat(groups[:, 5], 32))
    assert np.array_equal(out[:, 2], groups[:, ::-1].ravel())


def test_simd_broadcast_from_a_non_uniform_lane_is_an_error(emu: Emulator) -> None:
    with pytest.raises(EmuError, match="source lane differs"):
        launch(emu, SIMD.replace("BROADCAST_LANE", "lane & 1"), (1, 1, 1), (32, 1, 1),
               [np.zeros(32, np.float32), np.zeros(96, np.float32)], [True, False])


def test_bfloat_conversions_round_to_nearest_even(emu: Emulator) -> None:
    src = """
kernel void tobf(device const float *x [[buffer(0)]], device ushort *out [[buffer(1)]],
                 device float *back [[buffer(2)]], uint i [[thread_position_in_grid]])
{
    const bfloat h = bfloat(x[i]);
    out[i] = as_type<ushort>(h);
    back[i] = float(h);
}
"""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(4000).astype(np.float32),
                        (rng.integers(0, 2**16, 96).astype(np.uint32) << 16 | 0x8000).view(np.float32),  # ties
                        np.float32([np.inf, -np.inf, 0.0, -0.0, 3.4e38, 1e-40])])
    x = np.resize(x, 4096)
    bits, back = launch(emu, src, (16, 1, 1), (256, 1, 1),
                        [x, np.zeros(4096, np.uint16), np.zeros(4096, np.float32)], [True, False, False])[1:]
    assert np.array_equal(bits, f32_to_bf16_bits(x))
    assert np.array_equal(back.view(np.uint32), bits.astype(np.uint32) << 16)


def test_out_of_bounds_reads_and_writes_fault_with_a_report(emu: Emulator) -> None:
    src = """
kernel void oob(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],
                uint i [[thread_position_in_grid]])
{
    y[i] = x[(int)i + OFFSET];
}
"""
    x, y = np.zeros(100, np.float32), np.zeros(128, np.float32)
    with pytest.raises(EmuError, match=r"past the end of a 400-byte buffer .* thread \(100, 0, 0\)"):
        launch(emu, src.replace("OFFSET", "0"), (1, 1, 1), (128, 1, 1), [x, y], [True, False], workers=1)
    with pytest.raises(EmuError, match="before the start"):
        launch(emu, src.replace("OFFSET", "-1000"), (1, 1, 1), (32, 1, 1), [x, y], [True, False])


def test_stack_overflow_is_reported(emu: Emulator) -> None:
    src = """
kernel void deep(device float *y [[buffer(0)]], uint i [[thread_position_in_grid]])
{
    float big[40000];
    for (int k = 0; k < 40000; k++)
        big[k] = y[i] + (float)k;
    y[i] = big[(int)i * 7 % 40000];
}
"""
    with pytest.raises(EmuError, match="stack overflow"):
        launch(emu, src, (1, 1, 1), (32, 1, 1), [np.zeros(32, np.float32)])


def test_barriers_at_different_sites_are_divergent(emu: Emulator) -> None:
    src = """
kernel void div(device float *y [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    if (li < 3)
        threadgroup_barrier(mem_flags::mem_threadgroup);
    else
        threadgroup_barrier(mem_flags::mem_threadgroup);
    y[li] = 1.0f;
}
"""
    with pytest.raises(EmuError, match=r"different barriers \(lines 7, 9\)|different barriers \(lines 9, 7\)"):
        launch(emu, src, (1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32)])


# ---- the threads model's checks beyond lines (issue 21's audit) ----------------------------------
ROTATE = """
kernel void rotate(device uint *out [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    threadgroup uint t[64];
    t[li] = li * 3u;
    BARRIER
    out[li] = t[(li + 1) % 64];
}
"""


@pytest.mark.parametrize("barrier", ["threadgroup_barrier(mem_flags::mem_threadgroup);",
                                     "threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);"])
def test_a_barrier_with_mem_threadgroup_orders_threadgroup_memory(emu: Emulator, barrier: str) -> None:
    for order in ("forward", "reverse", "shuffle"):
        out = launch(emu, ROTATE.replace("BARRIER", barrier), (1, 1, 1), (64, 1, 1), [np.zeros(64, np.uint32)],
                     order=order)[0]
        assert np.array_equal(out, (np.arange(1, 65) % 64) * 3)


@pytest.mark.parametrize("barrier", ["threadgroup_barrier(mem_flags::mem_none);",
                                     "threadgroup_barrier(mem_flags::mem_device);"])
def test_a_barrier_without_mem_threadgroup_leaves_a_data_race(emu: Emulator, barrier: str) -> None:
    # The values would come out right (the fibers meet at the barrier): only the flags are wrong.
    with pytest.raises(EmuError, match=r"data race on threadgroup memory: a read after a write to byte \d+ of t "
                                       r"\(256 bytes\).*the barrier at line 8 does not order threadgroup memory"):
        launch(emu, ROTATE.replace("BARRIER", barrier), (1, 1, 1), (64, 1, 1), [np.zeros(64, np.uint32)])


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle"])
def test_a_data_race_is_reported_under_every_fiber_order(emu: Emulator, order: str) -> None:
    # Without a barrier, forward order reads the poison, reverse order the neighbours' values: the
    # race check does not depend on which.
    with pytest.raises(EmuError, match="data race on threadgroup memory"):
        launch(emu, ROTATE.replace("BARRIER", ""), (1, 1, 1), (64, 1, 1), [np.zeros(64, np.uint32)], order=order)


def test_a_write_over_data_another_thread_read_in_the_same_interval_is_a_race(emu: Emulator) -> None:
    src = """
kernel void war(device uint *out [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    threadgroup uint t[64];
    t[li] = li;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[li] = t[(li + 1) % 64];  // thread i reads what thread i + 1 overwrites next
    t[li] = 0u;
}
"""
    with pytest.raises(EmuError, match="a write after a read of byte"):
        launch(emu, src, (1, 1, 1), (64, 1, 1), [np.zeros(64, np.uint32)])


def test_a_thread_may_reread_and_rewrite_its_own_data(emu: Emulator) -> None:
    src = """
kernel void own(device uint *out [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    threadgroup uint t[64];
    t[li] = li;
    t[li] = t[li] + 1u;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[li] = t[li] + t[0];
}
"""
    out = launch(emu, src, (2, 1, 1), (64, 1, 1), [np.zeros(64, np.uint32)], order="shuffle")[0]
    assert np.array_equal(out, np.arange(64) + 2)


def test_one_barrier_line_reached_from_two_call_sites_is_divergent(emu: Emulator) -> None:
    src = """
static void sync_all() {
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

kernel void div(device float *y [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    if (li < 3)
        sync_all();
    else
        sync_all();
    y[li] = 1.0f;
}
"""
    with pytest.raises(EmuError, match="barrier of line 5 reached from different call sites"):
        launch(emu, src, (1, 1, 1), (64, 1, 1), [np.zeros(64, np.float32)])
    # one call site: fine
    out = launch(emu, src.replace("if (li < 3)\n        sync_all();\n    else\n", ""), (1, 1, 1), (64, 1, 1),
                 [np.zeros(64, np.float32)])[0]
    assert (out == 1.0).all()


def test_one_collective_line_reached_from_two_call_sites_is_divergent(emu: Emulator) -> None:
    src = """
static float total(float v) {
    return simd_sum(v);
}

kernel void div(device float *y [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    float s;
    if (li % 2 == 0)
        s = total(1.0f);
    else
        s = total(1.0f);
    y[li] = s;
}
"""
    with pytest.raises(EmuError, match=r"divergent simdgroup: lanes 0 and \d+ reach simd_sum \(line 5\) from "
                                       "different call sites"):
        launch(emu, src, (1, 1, 1), (32, 1, 1), [np.zeros(32, np.float32)])
    out = launch(emu, src.replace("if (li % 2 == 0)\n        s = total(1.0f);\n    else\n", ""), (1, 1, 1),
                 (32, 1, 1), [np.zeros(32, np.float32)])[0]
    assert (out == 32.0).all()


def test_signed_integer_overflow_is_reported(emu: Emulator) -> None:
    src = """
kernel void big(device long *y [[buffer(0)]], constant int &base [[buffer(1)]],
                uint li [[thread_index_in_threadgroup]])
{
    const int i = base + (int)li;
    y[li] = i;
}
"""
    out = launch(emu, src, (1, 1, 1), (4, 1, 1), [np.zeros(4, np.int64), np.int32([2147483640])], [False, True])[0]
    assert list(out) == [2147483640 + i for i in range(4)]
    with pytest.raises(EmuError, match=r"signed integer overflow \(a UBSan trap\).*thread \(8, 0, 0\)"):
        launch(emu, src, (1, 1, 1), (16, 1, 1), [np.zeros(16, np.int64), np.int32([2147483640])], [False, True])


def test_the_emulator_recovers_after_a_failed_launch(emu: Emulator) -> None:
    test_out_of_bounds_reads_and_writes_fault_with_a_report(emu)
    test_scalar_arguments_and_buffer_indices(emu)


# ---- the subset ----------------------------------------------------------------------------------
def test_a_source_must_hold_exactly_one_kernel() -> None:
    one = "kernel void a(device float *y [[buffer(0)]]) { y[0] = 1.0f; }\n"
    with pytest.raises(SubsetError, match="exactly one"):
        translate(HEAD + one + one.replace("void a", "void b"))
    with pytest.raises(SubsetError, match="exactly one"):
        translate(HEAD + "void helper() {}\n")


def test_every_kernel_parameter_needs_an_attribute() -> None:
    with pytest.raises(SubsetError, match="no \\[\\[buffer"):
        translate(HEAD + "kernel void a(device float *y) { y[0] = 1.0f; }\n")
    with pytest.raises(SubsetError, match="not supported"):
        translate(HEAD + "kernel void a(device float *y [[buffer(0)]], uint q [[quad_lane_id]]) { }\n")


def test_threadgroup_outside_an_array_declaration_does_not_compile(emu: Emulator) -> None:
    src = HEAD + """
kernel void p(device float *y [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{
    threadgroup float t[32];
    threadgroup float *q = &t[0];
    q[li] = 1.0f;
    y[li] = t[li];
}
"""
    with pytest.raises(CompileError, match="msl_emu_threadgroup_is_only_supported"):
        emu.compile(src)


@pytest.mark.parametrize("call", ["min(x, 3)", "max(x, 3)", "min((long)x, (long)3)", "max((ulong)x, (ulong)3)"])
def test_min_and_max_exist_for_32_bit_integers_only(emu: Emulator, call: str) -> None:
    # docs/msl-subset.md: min/max on long/ulong could not be established in MSL 2.3, so the subset
    # leaves them out and the emulator refuses them when the kernel compiles.
    src = HEAD + f"""
kernel void m(device long *y [[buffer(0)]], uint li [[thread_index_in_threadgroup]])
{{
    const int x = (int)li;
    y[li] = (long){call};
}}
"""
    if "long" in call:
        with pytest.raises(CompileError, match="min/max on a 64-bit integer is outside the MSL subset"):
            emu.compile(src)
    else:
        out = emu.run(emu.compile(src), (1, 1, 1), (8, 1, 1), [np.zeros(8, np.int64)], [False])[0]
        assert list(out) == [min(i, 3) if call.startswith("min") else max(i, 3) for i in range(8)]


def test_a_tiled_kernel_with_long_indices_compiles_in_the_subset(emu: Emulator) -> None:
    import tgrad
    from tgrad import render as R

    k = 2**31 + 16
    with tgrad.Tensor.from_numpy(np.ones((1, 1), np.float32)) as t:
        a, b = t.expand(1, k), t.expand(k, 1)
        kern = R.render_matmul(a, b, "tiled")
        a.release()
        b.release()
    assert "const long kend" in kern.source
    emu.compile(kern.source)


def test_translation_keeps_msl_line_numbers() -> None:
    tu, name = translate(HEAD + "kernel void k(device float *y [[buffer(0)]])\n{\n    threadgroup float t[4][8];\n}\n")
    assert name == "k"
    assert tu.startswith('#line 1 "k.metal"\n#include <metal_stdlib>')
    assert "    MSL_EMU_THREADGROUP(float, t, [4][8]);" in tu
    assert "k((device float *)msl_emu_buffers[0]);" in tu
