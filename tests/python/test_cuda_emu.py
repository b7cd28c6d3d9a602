"""The generated-CUDA tier: libtgrad's CUDA C++ kernels, rendered, compiled as C++ against the CUDA
emulation of tests/cuda_emu (the MSL emulator's runtime and checks) and run on the CPU, so the
CUDA generator is executed without a GPU (docs/msl-subset.md, "The CUDA subset").

Promises checked here, on a small slice of the conformance roster (the whole roster and the graph
cases run in test_scorecards.py's cuda-emu scorecard check):
- the naive and tiled routes are bit-identical to conformance.oracle.matmul_bits under every fiber
  order, and on an emulated device that flushes fp32 subnormals; the copy route copies views;
- the tier has teeth: a missing __syncthreads (a data race), an off-by-one bound (an out-of-bounds
  read and write), a divergent __syncthreads, an index past 2^31 in int, and a __shared__ outside
  a kernel-scope array each fail it;
- the rendered tc route (bf16 mma.sync) stays within its error bound (conformance.oracle.tc_bound)
  under each summation order, equals the oracle where every sum is exact (small integers), and
  gives the same bytes across fiber orders and worker counts; a missing __syncthreads in it, a
  misplaced fragment register and a wrong output coordinate fail it;
- tg_mma_m16n8k16_bf16, the tc route's warp-wide bf16 mma.sync, is emulated with the PTX ISA's
  m16n8k16 fragment layout (checked against a numpy model of the layout written from the ISA's
  tables), in each summation order, within the error bound; a wrong fragment, a partial warp and
  a divergent warp are caught.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tgrad
from tgrad import render as R
from tgrad.conformance.oracle import bf16_bits_to_f32, matmul_bits, tc_bound
from tgrad.conformance.rosters import Case, build_operands, roster

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cuda_emu.driver import Emulator, EmuError, SubsetError, find_cxx, translate  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(find_cxx() is None, reason="no C++ compiler for the emulator")]

ORDERS = ("forward", "reverse", "shuffle")


@pytest.fixture(scope="module")
def emu() -> Emulator:
    return Emulator()


def _slice() -> list[Case]:
    """A few roster cases of each family, small enough for two cores."""
    picked, per_family = [], {}
    for c in roster("ci"):
        if max(c.m, c.k, c.n) > 128 or per_family.get(c.family, 0) >= 4:
            continue
        per_family[c.family] = per_family.get(c.family, 0) + 1
        picked.append(c)
    return picked


CASES = _slice()


def _render(case: Case, route: str):
    a_base, b_base, apply_view = build_operands(case)
    with tgrad.Tensor.from_numpy(a_base) as a0, tgrad.Tensor.from_numpy(b_base) as b0:
        a, b = apply_view(a0, "a"), apply_view(b0, "b")
        try:
            kernel = R.render_copy(a, "cuda") if route == "copy" else R.render_matmul(a, b, route, "cuda")
        finally:
            a.release()
            b.release()
    a_bits = np.ascontiguousarray(apply_view(a_base, "a")).view(np.uint16)
    b_bits = np.ascontiguousarray(apply_view(b_base, "b")).view(np.uint16)
    bufs = (np.ascontiguousarray(a_base).view(np.uint16).ravel(), np.ascontiguousarray(b_base).view(np.uint16).ravel())
    return kernel, a_bits, b_bits, bufs


def _run_matmul(emu: Emulator, source: str, k, bufs, m: int, n: int, **options) -> np.ndarray:
    """Over exactly the buffer lengths the launch declares; unwritten outputs stay 0xFFFF (NaN)."""
    out = np.full(m * n, 0xFFFF, np.uint16)
    if 0 in k.grid:
        return out.reshape(m, n)
    args = [bufs[0][: k.buffer_elements[0]], bufs[1][: k.buffer_elements[1]], out]
    return emu.run(emu.compile(source), k.grid, k.threadgroup, args, [True, True, False], **options)[2].reshape(m, n)


# ---- rendered kernels, bit-exact ---------------------------------------------------------------------
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
def test_rendered_cuda_is_bit_identical_to_the_oracle(emu: Emulator, route: str, index: int) -> None:
    case = CASES[index]
    k, a_bits, b_bits, bufs = _render(case, route)
    got = _run_matmul(emu, k.source, k, bufs, case.m, case.n, order=ORDERS[index % 3], seed=index,
                      ftz=case.fill in ("special", "exponents"))
    want = matmul_bits(a_bits, b_bits)
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {want.size} outputs differ"


@pytest.mark.parametrize("case", [c for c in CASES if c.family == "views"], ids=lambda c: c.id)
def test_rendered_cuda_copy_materializes_views(emu: Emulator, case: Case) -> None:
    k, a_bits, _, bufs = _render(case, "copy")
    out = np.full(a_bits.size, 0xFFFF, np.uint16)
    out = emu.run(emu.compile(k.source), k.grid, k.threadgroup, [bufs[0][: k.buffer_elements[0]], out],
                  [True, False], order="shuffle", seed=1)[1]
    assert np.array_equal(out, a_bits.ravel())


# ---- teeth: broken kernels fail ------------------------------------------------------------------------
TEETH = Case("teeth-48x40x24", "teeth", 48, 40, 24)


def _mutant(route: str, old: str, new: str, count: int = 1, case: Case = TEETH):
    k, a_bits, b_bits, bufs = _render(case, route)
    assert k.source.count(old) >= count, f"the {route} kernel no longer contains {old!r}"
    return k, k.source.replace(old, new, count), bufs, matmul_bits(a_bits, b_bits)


def test_the_unmutated_teeth_kernels_pass(emu: Emulator) -> None:
    for route in ("naive", "tiled"):
        k, source, bufs, want = _mutant(route, "", "", 0)
        assert np.array_equal(_run_matmul(emu, source, k, bufs, 48, 24), want)


@pytest.mark.parametrize("which", [0, 1], ids=["after_the_loads", "after_the_products"])
@pytest.mark.parametrize("order", ORDERS)
def test_a_missing_syncthreads_is_a_data_race(emu: Emulator, which: int, order: str) -> None:
    k, source, bufs, _ = _mutant("tiled", "__syncthreads();", "__syncthreads();", 0)
    at = [m.start() for m in re.finditer(r"__syncthreads\(\);", source)][which]
    source = source[:at] + "/* removed */" + source[at + len("__syncthreads();"):]
    with pytest.raises(EmuError, match="data race on (threadgroup|shared) memory"):
        _run_matmul(emu, source, k, bufs, 48, 24, order=order)


def test_an_off_by_one_load_bound_reads_past_the_buffer(emu: Emulator) -> None:
    k, source, bufs, _ = _mutant("tiled", "if (m < 48 && k < 40)", "if (m < 48 && k <= 40)")
    with pytest.raises(EmuError, match="past the end of a 3840-byte buffer"):
        _run_matmul(emu, source, k, bufs, 48, 24)


def test_an_off_by_one_store_bound_writes_past_the_output(emu: Emulator) -> None:
    k, source, bufs, _ = _mutant("naive", "if (m >= 48 || n >= 24)", "if (m >= 48 || n >= 25)")
    with pytest.raises(EmuError, match="past the end of a .*-byte buffer"):
        _run_matmul(emu, source, k, bufs, 48, 24)


def test_a_divergent_syncthreads_is_caught(emu: Emulator) -> None:
    k, source, bufs, _ = _mutant("tiled", "    for (int k0 = 0;", "    if (lx == 3) return;\n    for (int k0 = 0;")
    with pytest.raises(EmuError, match="divergent barrier"):
        _run_matmul(emu, source, k, bufs, 48, 24)


def test_an_index_past_2_31_in_int_traps(emu: Emulator) -> None:
    k, source, bufs, _ = _mutant("naive", "a[m * 40 + (k + 1)]", "a[m * 2147483647 + (k + 1) - m * 2147483607]")
    with pytest.raises(EmuError, match="signed integer overflow"):
        _run_matmul(emu, source, k, bufs, 48, 24)


def test_shared_outside_a_kernel_scope_array_is_outside_the_subset(emu: Emulator) -> None:
    k, source, bufs, _ = _mutant("tiled", "    const int m0 =", "    __shared__ float flag;\n    const int m0 =")
    with pytest.raises(Exception, match="cuda_emu_shared_is_only_supported_for_kernel_scope_array_declarations"):
        emu.compile(source)


def test_a_double_fma_is_outside_the_subset(emu: Emulator) -> None:
    # a float kernel's mixed call: the float and the double overload (the softmax, norm and rope
    # kernels' own) match it equally, so it fails to compile (CUDA would compute in double)
    k, source, _, _ = _mutant("naive", "float r = fma(a, b, acc);", "float r = fma(a, b, (double)acc);")
    with pytest.raises(Exception, match=r"is ambiguous|are ambiguous|deleted function"):
        emu.compile(source)


def test_the_translation_keeps_line_numbers_and_takes_one_kernel() -> None:
    k, _, _, _ = _render(TEETH, "tiled")
    tu, name = translate(k.source)
    assert tu.startswith(f'#include "cuda_emu.h"\n#line 1 "{name}.cu"\n')
    assert "MSL_EMU_THREADGROUP(float, a_tile, [16][32]);" in tu and "__shared__" not in tu.split("msl_emu_entry")[0]
    with pytest.raises(SubsetError, match="exactly one"):
        translate(k.source + k.source.replace(name, name + "_2"))


def test_launch_bounds_are_accepted_and_ignored(emu: Emulator) -> None:
    k, a_bits, b_bits, bufs = _render(TEETH, "tiled")
    source = k.source.replace("__global__ void", "__global__ void __launch_bounds__(256)")
    assert translate(source)[1] == k.name
    assert np.array_equal(_run_matmul(emu, source, k, bufs, 48, 24), matmul_bits(a_bits, b_bits))


# ---- the rendered tc route: within its bound ------------------------------------------------------------
TC_FILLS = ("normal", "smallint", "ties")  # finite data: the bound is about rounding, not inf/NaN
TC_CASES = [c for c in roster("ci") if min(c.m, c.k, c.n) >= 8 and max(c.m, c.k, c.n) <= 128
            and c.fill in TC_FILLS][:8] + [Case("tc-smallint-40x48x24", "teeth", 40, 48, 24, fill="smallint"),
                                           Case("tc-ties-33x17x65", "teeth", 33, 17, 65, fill="ties")]
MMA = ("fma", "fma_reverse", "exact", "truncate")


def _check_tc(got_bits: np.ndarray, a_bits: np.ndarray, b_bits: np.ndarray, fill: str) -> float:
    """Every output within CUDA's tc bound (all in its domain for these fills); exact where every
    sum is (small integers). The worst |error| / bound."""
    s, allowed, in_domain = tc_bound(a_bits, b_bits, "cuda")
    assert in_domain.all()
    err = np.abs(bf16_bits_to_f32(got_bits).astype(np.float64) - s)
    bad = ~(err <= allowed)  # NaN is outside
    assert not bad.any(), f"{int(bad.sum())} outputs outside the bound, first at {np.argwhere(bad)[0]}"
    if fill == "smallint":
        assert np.array_equal(got_bits, matmul_bits(a_bits, b_bits))
    return float((err / allowed).max())


@pytest.mark.parametrize("index", range(len(TC_CASES)), ids=[c.id for c in TC_CASES])
def test_rendered_tc_is_within_its_error_bound(emu: Emulator, index: int) -> None:
    case = TC_CASES[index]
    k, a_bits, b_bits, bufs = _render(case, "tc")
    assert "tg_mma_m16n8k16_bf16(acc" in k.source
    got = _run_matmul(emu, k.source, k, bufs, case.m, case.n, mma=MMA[index % 4], order=ORDERS[index % 3],
                      seed=index)
    _check_tc(got, a_bits, b_bits, case.fill)


def test_rendered_tc_bound_holds_for_every_summation_order(emu: Emulator) -> None:
    case = next(c for c in TC_CASES if c.fill == "normal")
    k, a_bits, b_bits, bufs = _render(case, "tc")
    worst = [_check_tc(_run_matmul(emu, k.source, k, bufs, case.m, case.n, mma=mma), a_bits, b_bits, case.fill)
             for mma in MMA]
    assert 0.0 < max(worst) < 1.0


def test_rendered_tc_is_deterministic_across_orders_and_workers(emu: Emulator) -> None:
    case = Case("tc-normal-48x40x72", "teeth", 48, 40, 72)
    k, _, _, bufs = _render(case, "tc")
    runs = [_run_matmul(emu, k.source, k, bufs, 48, 72, order=order, seed=3, workers=workers)
            for order, workers in (("forward", 1), ("reverse", 2), ("shuffle", 2))]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


# ---- the precision policy picks the kernel: tc under "bounded" (within the bound), tiled under "exact" ----------
_POLICY_PROBE = r"""
import json, sys
import ml_dtypes, numpy as np
import tgrad
from tgrad import render
a_base, b_base = (np.load(path).view(ml_dtypes.bfloat16) for path in sys.argv[1:3])
kernels = {}
with tgrad.Tensor.from_numpy(a_base, device="cuda") as a, tgrad.Tensor.from_numpy(b_base, device="cuda") as b, \
        a @ b as c:
    for policy in ("exact", "bounded"):
        with tgrad.matmul_precision(policy):
            k = render.render_tensor(c, None, "cuda")  # the kernel realizing c would run now
            kernels[policy] = {"route": c.route, "kernel_route": k.route, "source": k.source, "grid": k.grid,
                               "threadgroup": k.threadgroup, "buffer_elements": k.buffer_elements}
print(json.dumps(kernels))
"""


def test_the_policy_picks_the_kernel_tc_within_its_bound_under_bounded_tiled_exact(
        emu: Emulator, fake_cuda: str, tmp_path: Path) -> None:
    import json
    import os
    import subprocess

    case = Case("policy-normal-48x40x72", "teeth", 48, 40, 72)
    a_base, b_base, _ = build_operands(case)
    a_bits, b_bits = (np.ascontiguousarray(x).view(np.uint16) for x in (a_base, b_base))
    np.save(tmp_path / "a.npy", a_bits)
    np.save(tmp_path / "b.npy", b_bits)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TGRAD_CUDA_DRIVER=fake_cuda,
               TGRAD_NVRTC=fake_cuda)
    env.pop("TGRAD_CUDA_DEVICE", None)
    proc = subprocess.run([sys.executable, "-c", _POLICY_PROBE, str(tmp_path / "a.npy"), str(tmp_path / "b.npy")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kernels = json.loads(proc.stdout.strip().splitlines()[-1])
    assert kernels["exact"]["route"] == "cuda.tiled" and kernels["exact"]["kernel_route"] == "tiled"
    assert kernels["bounded"]["route"] == "cuda.tc" and kernels["bounded"]["kernel_route"] == "tc"
    bufs = (a_bits.ravel(), b_bits.ravel())
    runs = {}
    for policy, k in kernels.items():
        launch = type("Launch", (), {"grid": tuple(k["grid"]), "threadgroup": tuple(k["threadgroup"]),
                                     "buffer_elements": tuple(k["buffer_elements"])})
        runs[policy] = _run_matmul(emu, k["source"], launch, bufs, case.m, case.n, mma="truncate")
    assert np.array_equal(runs["exact"], matmul_bits(a_bits, b_bits))  # exact: the oracle's bytes
    assert 0.0 < _check_tc(runs["bounded"], a_bits, b_bits, case.fill) < 1.0  # bounded: within tc's bound


TC_TEETH = Case("teeth-tc-48x40x24", "teeth", 48, 40, 24)


@pytest.mark.parametrize("which", [0, 1], ids=["after_the_loads", "after_the_products"])
def test_a_missing_syncthreads_in_tc_is_a_data_race(emu: Emulator, which: int) -> None:
    k, source, bufs, _ = _mutant("tc", "__syncthreads();", "__syncthreads();", 0, TC_TEETH)
    at = [m.start() for m in re.finditer(r"__syncthreads\(\);", source)][which]
    source = source[:at] + "/* removed */" + source[at + len("__syncthreads();"):]
    with pytest.raises(EmuError, match="data race on threadgroup memory"):
        _run_matmul(emu, source, k, bufs, 48, 24, order="reverse")


@pytest.mark.parametrize("old,new", [
    ("tg_mma_m16n8k16_bf16(acc[j], a0, a1, a2, a3, b0, b1)", "tg_mma_m16n8k16_bf16(acc[j], a0, a2, a1, a3, b0, b1)"),
    ("tg_mma_m16n8k16_bf16(acc[j], a0, a1, a2, a3, b0, b1)", "tg_mma_m16n8k16_bf16(acc[j], a0, a1, a2, a3, b1, b0)"),
    ("const int m = m0 + sm + g + 8 * (i / 2);", "const int m = m0 + sm + g + 8 * (i % 2);"),
], ids=["a1_a2_swapped", "b0_b1_swapped", "output_row"])
def test_a_misplaced_tc_fragment_breaks_the_bound(emu: Emulator, old: str, new: str) -> None:
    k, source, bufs, _ = _mutant("tc", old, new, 1, TC_TEETH)
    _, a_bits, b_bits, _ = _render(TC_TEETH, "tc")
    got = _run_matmul(emu, source, k, bufs, 48, 24)
    with pytest.raises(AssertionError, match="outside the bound"):
        _check_tc(got, a_bits, b_bits, "normal")


# ---- the warp-wide bf16 mma.sync (tc route) -----------------------------------------------------------
# A kernel that passes each lane's fragment registers, read from buffers the test lays out, to
# tg_mma_m16n8k16_bf16 and stores its D fragment. Its own definition is the real one (inline PTX,
# braces inside the asm string): the driver must remove it, or g++'s assembler refuses the PTX.
MMA_KERNEL = r"""// a hand-written kernel following the tc route's signature
typedef unsigned short ushort;
typedef unsigned int uint;

// d[0..3] += A * B: mma.sync m16n8k16, bf16 inputs, fp32 accumulators (a warp-wide collective)
__device__ __forceinline__ void tg_mma_m16n8k16_bf16(float *d, uint a0, uint a1, uint a2, uint a3, uint b0,
                                                     uint b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

extern "C" __global__ void mma_fragments(const uint *a, const uint *b, const float *c, float *d)
{
    const int t = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    const int w = (int)blockIdx.x * (int)(blockDim.x * blockDim.y) + t;  // one tile per warp
    float acc[4];
    for (int i = 0; i < 4; i++)
        acc[i] = c[w * 4 + i];
    CALL;
    for (int i = 0; i < 4; i++)
        d[w * 4 + i] = acc[i];
}
"""
CALL = "tg_mma_m16n8k16_bf16(acc, a[w * 4], a[w * 4 + 1], a[w * 4 + 2], a[w * 4 + 3], b[w * 2], b[w * 2 + 1])"


def _layout():
    """Each lane's (row, col) per fragment element, from the PTX ISA's tables for mma.m16n8k16
    with .bf16 A/B and .f32 C/D: groupID = lane >> 2, threadID_in_group = lane % 4."""
    a, b, c = {}, {}, {}
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        a[lane] = [(g if i < 2 or 4 <= i < 6 else g + 8, t * 2 + (i & 1) + (8 if i >= 4 else 0)) for i in range(8)]
        b[lane] = [(t * 2 + (i & 1) + (8 if i >= 2 else 0), g) for i in range(4)]
        c[lane] = [(g if i < 2 else g + 8, t * 2 + (i & 1)) for i in range(4)]
    return a, b, c


def _fragments(A: np.ndarray, B: np.ndarray, C: np.ndarray):
    """Per-lane registers: A [16, 16] and B [16, 8] as bf16 bits (two per uint, the lower-numbered
    element in the low half), C [16, 8] fp32."""
    la, lb, lc = _layout()
    a_regs = np.zeros((32, 4), np.uint32)
    b_regs = np.zeros((32, 2), np.uint32)
    c_frag = np.zeros((32, 4), np.float32)
    for lane in range(32):
        ea = [int(A[r, col]) for r, col in la[lane]]
        eb = [int(B[r, col]) for r, col in lb[lane]]
        a_regs[lane] = [ea[2 * i] | ea[2 * i + 1] << 16 for i in range(4)]
        b_regs[lane] = [eb[2 * i] | eb[2 * i + 1] << 16 for i in range(2)]
        c_frag[lane] = [C[r, col] for r, col in lc[lane]]
    return a_regs, b_regs, c_frag


def _gather(d_frag: np.ndarray) -> np.ndarray:
    _, _, lc = _layout()
    D = np.full((16, 8), np.nan, np.float32)
    for lane in range(32):
        for i, (r, col) in enumerate(lc[lane]):
            D[r, col] = d_frag[lane, i]
    return D


def _bf16(x: np.ndarray) -> np.ndarray:
    """bf16 bits of float32 values that are exactly bf16."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    assert not (bits & 0xFFFF).any()
    return (bits >> 16).astype(np.uint16)


def _as_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _mma(emu: Emulator, A: np.ndarray, B: np.ndarray, C: np.ndarray, source: str = MMA_KERNEL,
         call: str = CALL, block: tuple[int, int, int] = (32, 1, 1), **options) -> np.ndarray:
    """D = A B + C for A [16, 16], B [16, 8] (bf16 bits) and C [16, 8] (fp32), by the emulated
    mma.sync, as a [16, 8] fp32 matrix."""
    a_regs, b_regs, c_frag = _fragments(A, B, C)
    d = np.full((32, 4), np.nan, np.float32)
    out = emu.run(emu.compile(source.replace("CALL", call)), (1, 1, 1), block,
                  [a_regs.ravel(), b_regs.ravel(), c_frag.ravel(), d.ravel()], [True, True, True, False],
                  **options)[3]
    return _gather(out.reshape(32, 4))


def _random_operands(rng: np.random.Generator, low: int = -8, high: int = 9):
    A = _bf16(rng.integers(low, high, (16, 16)).astype(np.float32))
    B = _bf16(rng.integers(low, high, (16, 8)).astype(np.float32))
    C = rng.integers(-64, 65, (16, 8)).astype(np.float32)
    return A, B, C


@pytest.mark.parametrize("mma", ["fma", "fma_reverse", "exact"])
def test_mma_follows_the_ptx_fragment_layout(emu: Emulator, mma: str) -> None:
    # Small integers: every product and partial sum is exact, so each order gives A B + C exactly
    # and any misplaced element shows.
    A, B, C = _random_operands(np.random.default_rng(7))
    want = _as_f32(A).astype(np.float64) @ _as_f32(B).astype(np.float64) + C
    got = _mma(emu, A, B, C, mma=mma, order="shuffle", seed=2)
    assert np.array_equal(got, want.astype(np.float32)), np.argwhere(got != want)


def test_mma_reads_every_fragment_element_where_the_isa_puts_it(emu: Emulator) -> None:
    # One non-zero element of A (or B) at a time, against a 0/1 other operand: each lands in
    # exactly the output the layout says.
    for r, col in [(0, 0), (3, 9), (8, 1), (15, 15), (9, 6)]:
        A = np.zeros((16, 16), np.uint16)
        A[r, col] = 0x3F80  # 1.0
        B = _bf16(np.arange(128, dtype=np.float32).reshape(16, 8))
        got = _mma(emu, A, B, np.zeros((16, 8), np.float32))
        want = np.zeros((16, 8), np.float32)
        want[r] = _as_f32(B)[col]
        assert np.array_equal(got, want), (r, col)


@pytest.mark.parametrize("call,what", [
    (CALL.replace("a[w * 4 + 1], a[w * 4 + 2]", "a[w * 4 + 2], a[w * 4 + 1]"), "a1 and a2 swapped"),
    (CALL.replace("b[w * 2], b[w * 2 + 1]", "b[w * 2 + 1], b[w * 2]"), "b0 and b1 swapped"),
])
def test_a_wrong_fragment_gives_wrong_results(emu: Emulator, call: str, what: str) -> None:
    A, B, C = _random_operands(np.random.default_rng(11))
    want = (_as_f32(A).astype(np.float64) @ _as_f32(B).astype(np.float64) + C).astype(np.float32)
    assert not np.array_equal(_mma(emu, A, B, C, call=call), want), what


def test_the_summation_orders_differ_and_stay_within_the_bound(emu: Emulator) -> None:
    # Random normal data: the three models round differently, and each stays within the tc
    # route's bound for one K = 16 step: gamma_16 sum|a_k b_k| (+ |C|) of the exact result.
    rng = np.random.default_rng(5)
    A = _bf16(_round_bf16(rng.standard_normal((16, 16))))
    B = _bf16(_round_bf16(rng.standard_normal((16, 8))))
    C = rng.standard_normal((16, 8)).astype(np.float32)
    a, b = _as_f32(A).astype(np.float64), _as_f32(B).astype(np.float64)
    exact = a @ b + C
    mag = np.abs(a) @ np.abs(b) + np.abs(C)
    u = 2.0**-24
    gamma = 17 * u / (1 - 17 * u)
    results = {}
    for mma in ("fma", "fma_reverse", "exact"):
        got = _mma(emu, A, B, C, mma=mma).astype(np.float64)
        assert (np.abs(got - exact) <= gamma * mag).all(), mma
        results[mma] = got
    assert not np.array_equal(results["fma"], results["fma_reverse"])
    assert np.array_equal(results["exact"], exact.astype(np.float32).astype(np.float64))


def test_the_truncate_model_cuts_where_the_others_round(emu: Emulator) -> None:
    # C = 1 and eight products 2^-24 in the first block of 8: aligned to C's leading bit, each
    # product falls below fp32's 24 bits and is cut, so D = 1; the exact sum is 1 + 2^-21. And the
    # block's sum cut toward zero: (1 + 3 2^-23) + (1 + 2^-7) = 2 + 2^-7 + 3 2^-23 is 2 + 2^-7 +
    # 2^-22 cut, 2 + 2^-7 + 2^-21 rounded to nearest even.
    A = np.zeros((16, 16), np.uint16)
    B = np.zeros((16, 8), np.uint16)
    A[0, :8] = _bf16(np.float32(2.0**-12))
    B[:8, 0] = _bf16(np.float32(2.0**-12))
    A[1, 0], B[0, 1] = _bf16(np.float32(1 + 2.0**-7)), _bf16(np.float32(1.0))
    C = np.zeros((16, 8), np.float32)
    C[0, 0] = 1.0
    C[1, 1] = np.float32(1 + 3 * 2.0**-23)
    exact = _mma(emu, A, B, C, mma="exact")
    cut = _mma(emu, A, B, C, mma="truncate")
    assert exact[0, 0] == np.float32(1 + 2.0**-21) and cut[0, 0] == np.float32(1.0)
    assert exact[1, 1] == np.float32(2 + 2.0**-7 + 2.0**-21) and cut[1, 1] == np.float32(2 + 2.0**-7 + 2.0**-22)
    others = np.ones((16, 8), bool)
    others[0, 0] = others[1, 1] = False
    assert np.array_equal(exact[others], cut[others])  # zeros elsewhere


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded (nearest even) to bf16, still as float32."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def test_mma_needs_a_whole_warp(emu: Emulator) -> None:
    A, B, C = _random_operands(np.random.default_rng(1))
    with pytest.raises(EmuError, match="in a simdgroup of 16 threads: mma.sync needs all 32 lanes of a warp"):
        a_regs, b_regs, c_frag = _fragments(A, B, C)
        emu.run(emu.compile(MMA_KERNEL.replace("CALL", CALL)), (1, 1, 1), (16, 1, 1),
                [a_regs.ravel(), b_regs.ravel(), c_frag.ravel(), np.zeros(128, np.float32)], [True, True, True, False])


def test_mma_with_lanes_that_returned_deadlocks(emu: Emulator) -> None:
    A, B, C = _random_operands(np.random.default_rng(2))
    call = "if (t % 32 >= 8) " + CALL
    with pytest.raises(EmuError, match="deadlock: .* at a simdgroup collective"):
        _mma(emu, A, B, C, call=call)


def test_mma_is_a_collective_of_each_warp_by_linear_thread_index(emu: Emulator) -> None:
    # A 16 x 4 block: two warps of threads (x, y) ordered x + 16 y; each warp runs its own tile.
    rng = np.random.default_rng(3)
    tiles = [_random_operands(rng) for _ in range(2)]
    regs = [_fragments(*t) for t in tiles]
    bufs = [np.concatenate([r[i] for r in regs]).ravel() for i in range(3)] + [np.zeros(256, np.float32)]
    out = emu.run(emu.compile(MMA_KERNEL.replace("CALL", CALL)), (1, 1, 1), (16, 4, 1), bufs,
                  [True, True, True, False], order="reverse")[3].reshape(64, 4)
    for w, (A, B, C) in enumerate(tiles):
        want = (_as_f32(A).astype(np.float64) @ _as_f32(B).astype(np.float64) + C).astype(np.float32)
        assert np.array_equal(_gather(out[32 * w: 32 * w + 32]), want), w


def test_the_driver_removes_the_ptx_definition_and_keeps_line_numbers() -> None:
    source = MMA_KERNEL.replace("CALL", CALL)
    tu, name = translate(source)
    kernel_text = tu.split('#line 1 "msl_emu_entry"')[0]
    assert name == "mma_fragments" and "asm volatile" not in kernel_text and "{%0" not in kernel_text
    assert kernel_text.count("\n") == source.count("\n") + 3  # the include, #line and the joining newline
    assert kernel_text.splitlines()[2 + source.splitlines().index("extern \"C\" __global__ void mma_fragments("
                                                                  "const uint *a, const uint *b, const float *c, float *d)")] \
        .startswith('extern "C" __global__ void mma_fragments(')


def _nearest_f32(x) -> np.float32:
    """The float32 nearest (ties to even) to the exact rational x, in one rounding."""
    from fractions import Fraction

    f = np.float32(float(x))  # within one float32 step of the nearest
    best = None
    for c in (np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))):
        if not np.isfinite(c):
            continue
        d = abs(Fraction(float(c)) - x)
        if best is None or d < best[0] or (d == best[0] and int(c.view(np.uint32)) % 2 == 0):
            best = (d, c)
    return best[1]


def test_the_exact_order_rounds_the_exact_sum_once(emu: Emulator) -> None:
    from fractions import Fraction

    # 1 + 2^-24 + 2^-80: one rounding gives 1 + 2^-23; a sum in double first would tie to 1.
    A = np.zeros((16, 16), np.uint16)
    B = np.zeros((16, 8), np.uint16)
    A[0, 0], B[0, 0] = _bf16(np.float32(2.0**-12)), _bf16(np.float32(2.0**-12))
    A[0, 1], B[1, 0] = _bf16(np.float32(2.0**-40)), _bf16(np.float32(2.0**-40))
    C = np.zeros((16, 8), np.float32)
    C[0, 0] = 1.0
    assert _mma(emu, A, B, C, mma="exact")[0, 0] == np.float32(1 + 2.0**-23)
    assert _mma(emu, A, B, C, mma="fma")[0, 0] == np.float32(1.0)
    # Exponents spread over 2^-120 .. 2^120 (products far beyond double's 53 bits of each other).
    rng = np.random.default_rng(9)
    A = _bf16(_round_bf16(rng.standard_normal((16, 16)) * 2.0 ** rng.integers(-60, 61, (16, 16))))
    B = _bf16(_round_bf16(rng.standard_normal((16, 8)) * 2.0 ** rng.integers(-60, 61, (16, 8))))
    C = (rng.standard_normal((16, 8)) * 2.0 ** rng.integers(-100, 101, (16, 8))).astype(np.float32)
    got = _mma(emu, A, B, C, mma="exact")
    a, b = _as_f32(A), _as_f32(B)
    for r in range(16):
        for col in range(8):
            exact = Fraction(float(C[r, col])) + sum(Fraction(float(a[r, k])) * Fraction(float(b[k, col]))
                                                     for k in range(16))
            assert got[r, col] == _nearest_f32(exact), (r, col)
