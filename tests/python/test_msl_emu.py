"""The generated-MSL tier: libtgrad's kernels, rendered, compiled as C++ against the Metal
emulation of tests/msl_emu, and run on the CPU (docs/metal.md, docs/msl-subset.md).

Promises checked here, on the conformance roster ("ci": views, below-tile, odd and prime, empty,
special values, and the sentinels scaled to 64-256):
- the naive and tiled routes are bit-identical to conformance.oracle.matmul_bits, under every
  fiber order, and also on an emulated device that flushes fp32 subnormals;
- the copy route materializes every view kind bit for bit;
- the tc route stays within the error bound of docs/kernels.md, equals the oracle exactly where
  every sum is exact (small integers), and gives the same bytes across runs, fiber orders and
  worker counts;
- the tier has teeth: each deliberately broken kernel below (a missing barrier, an off-by-one
  bound, a non-uniform simdgroup argument, a read of unwritten threadgroup memory, a divergent
  barrier, a wrong accumulation order, a missing flush rule, a missing DAZ) fails it, and so do
  the defects an independent audit asked the threads model to catch (issue 21): a barrier with
  mem_flags::mem_none over shared threadgroup memory, a barrier or a simdgroup collective reached
  from two call sites, a missing barrier in the tc route (a data race, whatever the fiber order),
  and a 32-bit index past 2^31 (UBSan).
Each distinct kernel is compiled once (and cached across runs by its text's hash).
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import tgrad
from tgrad.conformance.oracle import bf16_bits_to_f32, matmul_bits, tc_bound
from tgrad.conformance.rosters import Case, build_operands, roster
from tgrad import render as R

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from msl_emu.driver import Emulator, EmuError, find_cxx  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_cxx() is None, reason="no C++ compiler for the MSL emulator")]

MAX_SENTINEL_DIM = 256
ORDERS = ("forward", "reverse", "shuffle")
TC_FILLS = ("normal", "smallint", "ties")  # finite data: the bound is about rounding, not inf/NaN


def _tier_cases() -> list[Case]:
    cases = []
    for c in roster("ci"):
        if c.family == "sentinel" and max(c.m, c.k, c.n) > MAX_SENTINEL_DIM:
            continue
        cases.append(c)
    return cases


CASES = _tier_cases()
TC_CASES = [c for c in CASES if min(c.m, c.k, c.n) >= 8 and c.fill in TC_FILLS]


@dataclass
class Prepared:
    """Everything one case needs, without live tensors (rendering happens once, up front)."""

    case: Case
    a_bits: np.ndarray  # logical operands, [M, K] and [K, N]
    b_bits: np.ndarray
    a_buf: np.ndarray  # the operands' buffers, as the kernels index them
    b_buf: np.ndarray
    kernels: dict[str, R.Kernel] = field(default_factory=dict)
    copies: list[tuple[R.Kernel, np.ndarray, np.ndarray]] = field(default_factory=list)  # (kernel, buf, want)
    order: str = "block32"  # the matmul order the kernels were rendered in
    _want: np.ndarray | None = None

    @property
    def want(self) -> np.ndarray:
        if self._want is None:
            self._want = matmul_bits(self.a_bits, self.b_bits, order=self.order)
        return self._want


def _prepare(case: Case) -> Prepared:
    a_base, b_base, apply_view = build_operands(case)
    a_np, b_np = apply_view(a_base, "a"), apply_view(b_base, "b")
    prepared = Prepared(case, np.ascontiguousarray(a_np).view(np.uint16), np.ascontiguousarray(b_np).view(np.uint16),
                        np.ascontiguousarray(a_base).view(np.uint16).ravel(),
                        np.ascontiguousarray(b_base).view(np.uint16).ravel())
    with tgrad.Tensor.from_numpy(a_base) as a0, tgrad.Tensor.from_numpy(b_base) as b0:
        a, b = apply_view(a0, "a"), apply_view(b0, "b")
        assert a.shares_buffer(a0) and b.shares_buffer(b0), "roster views must be zero-copy"
        for route in ("naive", "tiled", "tc"):
            try:
                prepared.kernels[route] = R.render_matmul(a, b, route)
            except tgrad.errors.RouteNotEligibleError:
                assert route == "tc"
        for view, base, buf in ((a, a_np, prepared.a_buf), (b, b_np, prepared.b_buf)):
            want = np.ascontiguousarray(base).view(np.uint16).ravel()
            prepared.copies.append((R.render_copy(view), buf, want))
        a.release()
        b.release()
    return prepared


class Tier:
    def __init__(self) -> None:
        self.emu = Emulator()
        self.prepared = {c.id: _prepare(c) for c in CASES}
        sources = [k.source for p in self.prepared.values() for k in p.kernels.values()]
        sources += [k.source for p in self.prepared.values() for k, _, _ in p.copies]
        self.compiled = dict(zip(sources, self.emu.compile_many(sources)))

    def kernel(self, k: R.Kernel):
        return self.compiled.get(k.source) or self.emu.compile(k.source)


@pytest.fixture(scope="module")
def tier() -> Tier:
    return Tier()


def run_matmul(emu: Emulator, compiled, k: R.Kernel, a_buf: np.ndarray, b_buf: np.ndarray, m: int, n: int,
               **options) -> np.ndarray:
    """Launch a matmul kernel over exactly the buffer lengths it declares (so a read past the last
    element it may touch hits the guard page); the output starts as 0xFFFF (NaN), so an output
    the kernel forgets to write shows."""
    assert len(a_buf) >= k.buffer_elements[0] and len(b_buf) >= k.buffer_elements[1]
    assert k.buffer_elements[2] == m * n
    out = np.full(m * n, 0xFFFF, np.uint16)
    bufs = [a_buf[: k.buffer_elements[0]], b_buf[: k.buffer_elements[1]], out]
    if 0 in k.grid:
        return out.reshape(m, n)
    result = emu.run(compiled, k.grid, k.threadgroup, bufs, [True, True, False], **options)
    return result[2].reshape(m, n)


def describe_mismatch(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.argwhere(got != want)
    lines = [f"{len(bad)} of {want.size} outputs differ"]
    for i, j in bad[:5]:
        lines.append(f"  C[{i},{j}]: got 0x{int(got[i, j]):04x}, want 0x{int(want[i, j]):04x}")
    return "\n".join(lines)


def _order_for(index: int) -> dict:
    order = ORDERS[index % len(ORDERS)]
    return {"order": order, "seed": index}


# ---- the bit-exact routes ------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
def test_route_is_bit_identical_to_the_oracle(tier: Tier, route: str, index: int) -> None:
    p = tier.prepared[CASES[index].id]
    k = p.kernels[route]
    got = run_matmul(tier.emu, tier.kernel(k), k, p.a_buf, p.b_buf, p.case.m, p.case.n, **_order_for(index))
    assert np.array_equal(got, p.want), describe_mismatch(got, p.want)


FTZ_CASES = [c for c in CASES if c.fill in ("special", "tiny", "exponents")]


@pytest.mark.parametrize("route", ["naive", "tiled"])
@pytest.mark.parametrize("case", FTZ_CASES, ids=[c.id for c in FTZ_CASES])
def test_flush_rule_needs_no_subnormals_from_the_device(tier: Tier, route: str, case: Case) -> None:
    # The device's fma may flush fp32 subnormal results (Metal does not promise them): tg_step
    # decides every result at or below 2^-126 in a scaled domain, so the bits do not change.
    p = tier.prepared[case.id]
    k = p.kernels[route]
    got = run_matmul(tier.emu, tier.kernel(k), k, p.a_buf, p.b_buf, case.m, case.n, ftz=True, order="reverse")
    assert np.array_equal(got, p.want), describe_mismatch(got, p.want)


COPY_CASES = [c for c in CASES if c.family == "views" and c.fill == "normal"] + \
    [c for c in CASES if c.family in ("below_tile", "empty") and c.fill == "normal"]


@pytest.mark.parametrize("case", COPY_CASES, ids=[c.id for c in COPY_CASES])
def test_copy_route_materializes_views_bit_for_bit(tier: Tier, case: Case) -> None:
    p = tier.prepared[case.id]
    for i, (k, buf, want) in enumerate(p.copies):
        out = np.full(len(want), 0xFFFF, np.uint16)
        if 0 not in k.grid:
            out = tier.emu.run(tier.kernel(k), k.grid, k.threadgroup, [buf[: k.buffer_elements[0]], out],
                               [True, False], **_order_for(i))[1]
        assert np.array_equal(out, want), f"operand {'ab'[i]}: {np.count_nonzero(out != want)} elements differ"


def _nd_views():
    """(name, base shape, ops on a numpy array / tgrad Tensor alike) beyond the matmul operands."""
    return [
        ("3d_permute", (3, 4, 5), lambda x: x.permute(2, 0, 1) if isinstance(x, tgrad.Tensor) else x.transpose(2, 0, 1)),
        ("3d_negstep_slice", (6, 5, 7), lambda x: x[::-2, 1:4, ::3]),
        ("3d_expand_middle", (4, 1, 3), lambda x: x.expand(4, 6, 3) if isinstance(x, tgrad.Tensor)
         else np.broadcast_to(x, (4, 6, 3))),
        ("4d_select_and_transpose", (2, 3, 4, 5), lambda x: x[1].T if isinstance(x, tgrad.Tensor) else x[1].T),
        ("0d_scalar", (3, 4), lambda x: x[2, 1]),
        ("1d_reversed", (1000,), lambda x: x[::-7]),
        ("special_bits_transpose", (9, 13), lambda x: x.T),
    ]


@pytest.mark.parametrize("name,shape,view", _nd_views(), ids=[v[0] for v in _nd_views()])
def test_copy_route_handles_any_rank_and_keeps_nan_payloads(tier: Tier, name: str, shape, view) -> None:
    from tgrad.conformance.fills import fill_bits

    base = fill_bits("special", shape, np.random.default_rng(len(name)))
    want = np.ascontiguousarray(view(base)).ravel()
    with tgrad.Tensor.from_bf16_bits(base) as t0:
        v = view(t0)
        k = R.render_copy(v)
        v.release()
    out = np.full(want.size, 0xFFFF, np.uint16)
    out = tier.emu.run(tier.kernel(k), k.grid, k.threadgroup, [base.ravel()[: k.buffer_elements[0]], out],
                       [True, False], order="shuffle", seed=3)[1]
    assert np.array_equal(out, want)


# ---- the tc route: an error bound, exactness where sums are exact, determinism --------------------
# The bound and its domain: tc_bound in conformance/oracle.py (docs/kernels.md).
def check_tc(got_bits: np.ndarray, p: Prepared) -> float:
    """Assert the bound on the outputs in its domain; returns the worst |error| / bound."""
    s, allowed, in_domain = tc_bound(p.a_bits, p.b_bits)
    got = bf16_bits_to_f32(got_bits).astype(np.float64)
    s, allowed, got = s[in_domain], allowed[in_domain], got[in_domain]
    assert np.isfinite(got).all(), "tc produced inf/NaN from finite data within the bound's domain"
    err = np.abs(got - s)
    worst = np.unravel_index(np.argmax(err - allowed), err.shape)
    assert (err <= allowed).all(), (
        f"C{tuple(int(i) for i in worst)}: |{got[worst]!r} - {s[worst]!r}| = {err[worst]!r} > {allowed[worst]!r}")
    if p.case.fill == "smallint":  # every product and partial sum is an exact integer in fp32
        assert np.array_equal(got_bits, p.want), describe_mismatch(got_bits, p.want)
    assert in_domain.all() or p.case.fill == "overflow", "a roster fill left the tc bound's domain"
    return float((err / allowed).max()) if err.size else 0.0


@pytest.mark.parametrize("index", range(len(TC_CASES)), ids=[c.id for c in TC_CASES])
def test_tc_route_is_within_its_error_bound(tier: Tier, index: int) -> None:
    case = TC_CASES[index]
    p = tier.prepared[case.id]
    k = p.kernels["tc"]
    got = run_matmul(tier.emu, tier.kernel(k), k, p.a_buf, p.b_buf, case.m, case.n, **_order_for(index))
    check_tc(got, p)


DETERMINISM_CASES = [c for c in TC_CASES if c.fill == "normal"
                     and (c.family == "sentinel" or c.a_view != "plain" or c.family == "odd_prime")][:6]


@pytest.mark.parametrize("case", DETERMINISM_CASES, ids=[c.id for c in DETERMINISM_CASES])
def test_tc_route_is_deterministic_across_runs_orders_and_workers(tier: Tier, case: Case) -> None:
    p = tier.prepared[case.id]
    k = p.kernels["tc"]
    compiled = tier.kernel(k)
    runs = []
    for order, seed, workers in [("forward", 0, 2), ("forward", 0, 2), ("reverse", 0, 1), ("shuffle", 1, 2),
                                 ("shuffle", 2, 1)]:
        runs.append(run_matmul(tier.emu, compiled, k, p.a_buf, p.b_buf, case.m, case.n, order=order, seed=seed,
                               workers=workers))
    for other in runs[1:]:
        assert np.array_equal(runs[0], other), describe_mismatch(other, runs[0])


def _overflowing_products(m: int = 8, k: int = 8, n: int = 8) -> Prepared:
    """Finite operands whose products leave fp32 in C[0, 0] only: 2^100·2^100 - 2^100·2^100."""
    rng = np.random.default_rng(21)
    a = rng.integers(-4, 5, size=(m, k)).astype(np.float32)
    b = rng.integers(-4, 5, size=(k, n)).astype(np.float32)
    a[0, :] = 0.0
    b[:, 0] = 0.0
    a[0, 0] = a[0, 1] = 2.0**100
    b[0, 0], b[1, 0] = 2.0**100, -(2.0**100)
    a_bits = a.view(np.uint32).astype(np.uint64) >> 16  # exact: every value has 8 significant bits
    b_bits = b.view(np.uint32).astype(np.uint64) >> 16
    a_bits, b_bits = a_bits.astype(np.uint16), b_bits.astype(np.uint16)
    case = Case("teeth-tc-overflow", "teeth", m, k, n, fill="overflow")
    return Prepared(case, a_bits, b_bits, a_bits.ravel(), b_bits.ravel())


def test_tc_products_past_fp32_leave_the_bound_domain_and_depend_on_the_order(emu: Emulator) -> None:
    # docs/kernels.md: finite inputs whose products overflow fp32 give +inf, -inf or a finite value
    # depending on the hardware's order (here C[0, 0] = 2^200 - 2^200, exactly 0). The checker
    # exempts exactly those outputs and still holds every other one to the bound.
    p = _overflowing_products()
    s, _, in_domain = tc_bound(p.a_bits, p.b_bits)
    assert not in_domain[0, 0] and in_domain.sum() == in_domain.size - 1 and s[0, 0] == 0.0
    with tgrad.Tensor.from_bf16_bits(p.a_bits) as a, tgrad.Tensor.from_bf16_bits(p.b_bits) as b:
        kern = R.render_matmul(a, b, "tc")
    compiled = emu.compile(kern.source)
    corner = set()
    for mma in ("fma", "fma_reverse", "exact"):
        got = run_matmul(emu, compiled, kern, p.a_buf, p.b_buf, 8, 8, mma=mma)
        check_tc(got, p)
        corner.add(int(got[0, 0]))
    assert corner == {0x7f80, 0xff80, 0x0000}, sorted(hex(c) for c in corner)  # +inf, -inf, +0


@pytest.mark.parametrize("mma", ["fma", "fma_reverse", "exact"])
def test_tc_bound_holds_for_any_multiply_accumulate_order(tier: Tier, mma: str) -> None:
    # The order inside the hardware's 8x8 multiply-accumulate is not documented: the bound must
    # not depend on it, so it is checked under three models of it.
    worst = 0.0
    for case in [c for c in TC_CASES if c.family in ("sentinel", "odd_prime")][:5]:
        p = tier.prepared[case.id]
        k = p.kernels["tc"]
        got = run_matmul(tier.emu, tier.kernel(k), k, p.a_buf, p.b_buf, case.m, case.n, mma=mma)
        worst = max(worst, check_tc(got, p))
    assert 0.0 < worst < 1.0


def test_every_roster_family_reaches_the_tier() -> None:
    families = {c.family for c in CASES}
    assert {"below_tile", "views", "odd_prime", "sentinel", "empty", "special_values"} <= families
    sentinels = [c for c in CASES if c.family == "sentinel"]
    assert {(64, 64, 64), (128, 128, 128), (256, 256, 256)} <= {(c.m, c.k, c.n) for c in sentinels}
    assert len(TC_CASES) >= 20


# ---- teeth: broken kernels fail the tier ------------------------------------------------------------
def _mutate(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) >= count, f"mutation anchor {old!r} not in the kernel: update this test"
    return text.replace(old, new, count)


def _render(m: int, k: int, n: int, route: str, fill: str = "normal", a_view: str = "plain"):
    """route: a route name, or "route:order" to render in a matmul order other than the default."""
    route, _, order = route.partition(":")
    order = order or tgrad.get_matmul_order()
    case = Case(f"teeth-{route}-{m}x{k}x{n}-{fill}", "teeth", m, k, n, a_view=a_view, fill=fill, seed=m * 7 + n)
    a_base, b_base, apply_view = build_operands(case)
    a_np, b_np = apply_view(a_base, "a"), apply_view(b_base, "b")
    with tgrad.Tensor.from_numpy(a_base) as a0, tgrad.Tensor.from_numpy(b_base) as b0, tgrad.matmul_order(order):
        a = apply_view(a0, "a")
        kern = R.render_matmul(a, b0, route)
        a.release()
    a_bits = np.ascontiguousarray(a_np).view(np.uint16)
    b_bits = np.ascontiguousarray(b_np).view(np.uint16)
    p = Prepared(case, a_bits, b_bits, np.ascontiguousarray(a_base).view(np.uint16).ravel(),
                 np.ascontiguousarray(b_base).view(np.uint16).ravel(), order=order)
    return kern, p


def tier_verdict(emu: Emulator, kern: R.Kernel, source: str, p: Prepared, route: str) -> str | None:
    """None when `source` (standing in for kern's text) passes what the tier checks for this case
    under every fiber order; else the first failure."""
    compiled = emu.compile(source)
    for order in ORDERS:
        try:
            got = run_matmul(emu, compiled, kern, p.a_buf, p.b_buf, p.case.m, p.case.n, order=order, seed=5)
        except EmuError as exc:
            return f"{order}: {exc}"
        try:
            if route == "tc":
                check_tc(got, p)
            else:
                assert np.array_equal(got, p.want), describe_mismatch(got, p.want)
        except AssertionError as exc:
            return f"{order}: {exc}"
    return None


@pytest.fixture(scope="module")
def emu(tier: Tier) -> Emulator:
    return tier.emu


def test_unbroken_kernels_pass_the_checks_the_broken_ones_fail(emu: Emulator) -> None:
    # the controls for the tests below: the same shapes and fills, unmodified
    for route, shape, fill in [("tiled", (33, 65, 97), "normal"), ("tc", (40, 24, 56), "normal"),
                               ("tiled", (9, 5, 13), "tiny"), ("naive", (17, 33, 9), "special")]:
        kern, p = _render(*shape, route, fill)
        assert tier_verdict(emu, kern, kern.source, p, route) is None


BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);"
FLUSH_TEST = "if (fabs(r) <= as_type<float>(0x00800000u) && fabs(acc) < as_type<float>(0x0d800000u)) {"

TEETH = [
    # (id, route, shape, fill, old, new, count, what the failure must say)
    ("missing_barrier_after_staging", "tiled", (33, 65, 97), "normal",
     f"        {BARRIER}\n        const int kend", "        const int kend", 1, "data race"),
    ("missing_barrier_before_restaging", "tiled", (33, 65, 97), "normal",
     f"        }}\n        {BARRIER}\n    }}\n", "        }\n    }\n", 1, "data race"),
    ("missing_barrier_in_tc", "tc", (40, 24, 56), "normal",
     f"        {BARRIER}\n        for (int kk", "        for (int kk", 1, "data race on threadgroup memory"),
    ("missing_barrier_before_tc_restaging", "tc", (40, 24, 56), "normal",
     f"        }}\n        {BARRIER}\n    }}\n", "        }\n    }\n", 1, "data race"),
    ("missing_barrier_before_tc_output_tile", "tc", (40, 24, 56), "normal",
     f"    {BARRIER}\n    for (int e", "    for (int e", 1, "a read after a write"),
    # a barrier that orders no threadgroup memory where threadgroup memory is shared
    ("barrier_with_mem_none", "tiled", (33, 65, 97), "normal", f"        {BARRIER}\n        const int kend",
     "        threadgroup_barrier(mem_flags::mem_none);\n        const int kend", 1,
     "does not order threadgroup memory"),
    ("tc_barrier_with_mem_none", "tc", (40, 24, 56), "normal", f"        {BARRIER}\n        for (int kk",
     "        threadgroup_barrier(mem_flags::mem_none);\n        for (int kk", 1, "does not order threadgroup memory"),
    ("tc_barrier_with_mem_device", "tc", (40, 24, 56), "normal", f"    {BARRIER}\n    for (int e",
     "    threadgroup_barrier(mem_flags::mem_device);\n    for (int e", 1, "does not order threadgroup memory"),
    # one barrier line, two call sites: threads of a threadgroup wait at different barriers
    ("barrier_from_two_call_sites", "tiled", (33, 65, 97), "normal", f"        {BARRIER}\n        const int kend",
     "        if (li < 128)\n            tg_sync();\n        else\n            tg_sync();\n        const int kend", 1,
     "different call sites"),
    # one collective line, two call sites: the lanes of a simdgroup are at different collectives
    ("simdgroup_collective_from_two_call_sites", "tc", (40, 24, 56), "normal",
     "                    simdgroup_multiply_accumulate(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);",
     "                    if ((li & 31) < 16)\n                        tg_mma(acc[i][j], a_frag[i], b_frag[j]);\n"
     "                    else\n                        tg_mma(acc[i][j], a_frag[i], b_frag[j]);", 1,
     "different call sites"),
    ("off_by_one_row_bound", "tiled", (33, 65, 97), "normal", "if (m < 33 && k < 65)", "if (m < 34 && k < 65)", 1,
     "past the end"),
    ("off_by_one_output_bound", "naive", (33, 65, 97), "normal", "if (m >= 33 ||", "if (m > 33 ||", 1, "past the end"),
    ("output_bound_missing", "tc", (40, 24, 56), "normal", "if (m < 40 && n < 56)\n", "if (m < 40 + 32)\n", 1,
     "past the end"),
    ("non_uniform_simdgroup_pointer", "tc", (40, 24, 56), "normal", "&a_tile[sm + 8 * i][kk]",
     "&a_tile[sm + 8 * i + (li & 1)][kk]", 1, "the memory pointer differs"),
    ("non_uniform_simdgroup_stride", "tc", (40, 24, 56), "normal", "[sn + 8 * j], 32);",
     "[sn + 8 * j], 32 + (li & 1));", 1, "elements_per_row differs"),
    ("non_uniform_matrix_variable", "tc", (40, 24, 56), "normal", "a_frag[i], b_frag[j], acc[i][j]);",
     "a_frag[i ^ (li & 1)], b_frag[j], acc[i][j]);", 1, "lanes name different variables"),
    ("read_of_unwritten_threadgroup_memory", "tiled", (33, 65, 97), "normal",
     "for (int e = li; e < 512; e += 256) {\n            const int col = e % 32;",
     "for (int e = li; e < 256; e += 256) {\n            const int col = e % 32;", 1, "differ"),
    ("unwritten_tc_output_tile", "tc", (40, 24, 56), "normal", "for (int j = 0; j < 2; j++)\n            simdgroup_store",
     "for (int j = 0; j < 1; j++)\n            simdgroup_store", 1, ""),
    # threads that skip the barrier read the tile others are staging: the race shows before the
    # divergence would (test_msl_emu_model.py checks divergent barriers on their own)
    ("divergent_barrier", "tiled", (33, 65, 97), "normal", f"        {BARRIER}\n        const int kend",
     f"        if (li < 200)\n            {BARRIER}\n        const int kend", 1, "data race"),
    ("early_return_in_a_simdgroup", "tc", (40, 24, 56), "normal",
     "    for (int i = 0; i < 2; i++)\n        for (int j = 0; j < 2; j++)\n            simdgroup_store",
     "    if ((li & 31) < 16)\n        return;\n"
     "    for (int i = 0; i < 2; i++)\n        for (int j = 0; j < 2; j++)\n            simdgroup_store", 1, "deadlock"),
    ("divergent_simdgroup_collective", "tc", (40, 24, 56), "normal",
     "                simdgroup_load(b_frag[j], &b_tile[kk][sn + 8 * j], 32);",
     "                if ((li & 31) < 16)\n                    simdgroup_load(b_frag[j], &b_tile[kk][sn + 8 * j], 32);\n"
     "                else\n                    simdgroup_load(b_frag[j], &b_tile[kk][sn + 8 * j], 32);", 1,
     "divergent simdgroup"),
    ("write_to_an_input", "naive", (17, 33, 9), "normal", "    c[m * 9 + n] = tg_store_bf16(acc);",
     "    ((device ushort *)a)[m * 33] = tg_store_bf16(acc);", 1, "write to an input"),
    # numerics: both orders, the flush rule and DAZ are each load-bearing
    ("one_chain_not_two", "naive", (33, 65, 97), "exponents",
     "            odd = tg_step(odd, tg_load_bf16(a[m * 65 + (k + 1)]), tg_load_bf16(b[(k + 1) * 97 + n]));",
     "            even = tg_step(even, tg_load_bf16(a[m * 65 + (k + 1)]), tg_load_bf16(b[(k + 1) * 97 + n]));",
     1, "differ"),
    ("even_element_first", "naive:pairwise", (33, 65, 97), "ties",
     "acc = tg_step(acc, tg_load_bf16(a[m * 65 + (k + 1)]), tg_load_bf16(b[(k + 1) * 97 + n]));\n"
     "        acc = tg_step(acc, tg_load_bf16(a[m * 65 + k]), tg_load_bf16(b[k * 97 + n]));",
     "acc = tg_step(acc, tg_load_bf16(a[m * 65 + k]), tg_load_bf16(b[k * 97 + n]));\n"
     "        acc = tg_step(acc, tg_load_bf16(a[m * 65 + (k + 1)]), tg_load_bf16(b[(k + 1) * 97 + n]));",
     1, "differ"),
    ("no_flush_rule", "tiled", (9, 5, 13), "tiny", FLUSH_TEST, "if (false) {", 1, "differ"),
    ("no_daz_on_inputs", "naive", (17, 33, 9), "special", "        u &= 0x80000000u;", "        u &= 0xffffffffu;", 1,
     "differ"),
    ("no_nan_canonicalization", "tiled", (17, 33, 9), "special", "        return (ushort)0x7fc0u;",
     "        return (ushort)(u >> 16);", 1, "differ"),
]


@pytest.mark.parametrize("tid,route,shape,fill,old,new,count,expect", TEETH, ids=[t[0] for t in TEETH])
def test_broken_kernel_fails_the_tier(emu: Emulator, tid, route, shape, fill, old, new, count, expect) -> None:
    kern, p = _render(*shape, route, fill)
    broken = _with_helpers(_mutate(kern.source, old, new, count))
    verdict = tier_verdict(emu, kern, broken, p, route.partition(":")[0])
    assert verdict is not None, f"{tid}: the broken kernel passed the tier"
    assert expect in verdict, verdict


# Helpers the call-site mutants call (MSL allows barriers and collectives in any function): each is
# one barrier or collective line, reached from two places.
HELPERS = {
    "tg_sync();": "static void tg_sync() {\n    threadgroup_barrier(mem_flags::mem_threadgroup);\n}\n\n",
    "tg_mma(": "static void tg_mma(thread simdgroup_float8x8 &d, thread const simdgroup_float8x8 &a,\n"
               "                   thread const simdgroup_float8x8 &b) {\n"
               "    simdgroup_multiply_accumulate(d, a, b, d);\n}\n\n",
}


def _with_helpers(source: str) -> str:
    for call, definition in HELPERS.items():
        if call in source:
            source = source.replace("kernel void ", definition + "kernel void ", 1)
    return source


def test_call_site_mutants_are_sound_kernels_for_a_line_only_check(emu: Emulator) -> None:
    # The helpers themselves are fine: one call site each, the kernel passes the tier.
    kern, p = _render(33, 65, 97, "tiled")
    once = _with_helpers(_mutate(kern.source, f"        {BARRIER}\n        const int kend",
                                 "        tg_sync();\n        const int kend"))
    assert tier_verdict(emu, kern, once, p, "tiled") is None
    kern, p = _render(40, 24, 56, "tc")
    once = _with_helpers(_mutate(kern.source, "simdgroup_multiply_accumulate(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);",
                                 "tg_mma(acc[i][j], a_frag[i], b_frag[j]);"))
    assert tier_verdict(emu, kern, once, p, "tc") is None


def test_an_index_past_2_31_in_int_is_caught_by_ubsan(emu: Emulator) -> None:
    # The renderer computes indices in long once they pass 2^31 (a copy of 2^31 + 65536 elements
    # here); the same kernel with gx and li in int overflows in gx * 256. The launch runs the last threadgroup first (reverse
    # order), whose first index is past 2^31, over one-element buffers: the overflow traps before
    # any access. The control, in long, gets as far as the store past the one-element output.
    with tgrad.Tensor.from_numpy(np.ones((1, 1), np.float32)) as t:
        v = t.expand(65536, 32769)
        kern = R.render_copy(v)
        v.release()
    assert "const long i = gx * 256 + li;" in kern.source
    bufs = [np.zeros(1, np.uint16), np.zeros(1, np.uint16)]
    with pytest.raises(EmuError, match="segmentation fault") as control:
        emu.run(emu.compile(kern.source), kern.grid, kern.threadgroup, bufs, [True, False], order="reverse", workers=1)
    assert "overflow" not in str(control.value)
    # the classic slip: the index widened to long only after gx * 256 was computed in int
    broken = _mutate(_mutate(kern.source, "const long gx = (long)group_pos.x;", "const int gx = (int)group_pos.x;"),
                     "const long li = (long)local_index;", "const int li = (int)local_index;")
    with pytest.raises(EmuError, match="signed integer overflow"):
        emu.run(emu.compile(broken), kern.grid, kern.threadgroup, bufs, [True, False], order="reverse", workers=1)


def _run_example(emu: Emulator, ex, route: str, source_edit=None, **options) -> int:
    a_bits, b_bits = ex.bits()
    with tgrad.Tensor.from_bf16_bits(a_bits) as a, tgrad.Tensor.from_bf16_bits(b_bits) as b, \
            tgrad.matmul_order(ex.order):
        kern = R.render_matmul(a, b, route)
    source = source_edit(kern.source) if source_edit else kern.source
    out = run_matmul(emu, emu.compile(source), kern, a_bits.ravel(), b_bits.ravel(), 1, 1, **options)
    return int(out[0, 0])


@pytest.mark.parametrize("ftz", [False, True], ids=["ieee_device", "ftz_device"])
@pytest.mark.parametrize("route", ["naive", "tiled"])
def test_contract_examples_through_generated_kernels(emu: Emulator, route: str, ftz: bool) -> None:
    # The hand-computed examples of the numerics contract (order, rounding per addition, flush
    # after rounding with its boundary cases, DAZ, signed zeros, NaN, overflow), one kernel each.
    from tgrad.conformance.rosters import CONTRACT_EXAMPLES

    wrong = [f"{ex.id}: got 0x{got:04x}, want 0x{ex.expected:04x} ({ex.why})"
             for ex in CONTRACT_EXAMPLES if (got := _run_example(emu, ex, route, ftz=ftz)) != ex.expected]
    assert not wrong, "\n".join(wrong)


def test_flush_before_the_boundary_recheck_fails_the_contract_examples(emu: Emulator) -> None:
    # A plain "flush if the fma result is below 2^-126" misses the sum that rounds up to 2^-126
    # from below though its unbounded rounding is tiny: the contract example catches it.
    from tgrad.conformance.rosters import CONTRACT_EXAMPLES

    def naive_flush(text: str) -> str:
        return _mutate(text, FLUSH_TEST, "if (fabs(r) < as_type<float>(0x00800000u))\n"
                       "        r = copysign(0.0f, r);\n    if (false) {")

    example = next(ex for ex in CONTRACT_EXAMPLES if ex.id == "tininess_after_rounding_flushes")
    assert _run_example(emu, example, "tiled") == example.expected
    assert _run_example(emu, example, "tiled", naive_flush) != example.expected


@pytest.mark.parametrize("route,shape", [("tiled", (33, 65, 97)), ("tc", (40, 24, 56))])
def test_a_missing_barrier_is_caught_under_every_fiber_order(emu: Emulator, route: str, shape) -> None:
    # Wrong bytes show under some orders only; the race check sees the race under all of them.
    kern, p = _render(*shape, route)
    anchor = "        const int kend" if route == "tiled" else "        for (int kk"
    broken = _mutate(kern.source, f"        {BARRIER}\n{anchor}", anchor)
    compiled = emu.compile(broken)
    for order in ORDERS:
        with pytest.raises(EmuError, match="data race on threadgroup memory"):
            run_matmul(emu, compiled, kern, p.a_buf, p.b_buf, *shape[::2], order=order, seed=9)


# ---- the tier's economics ------------------------------------------------------------------------
def test_each_distinct_kernel_is_compiled_once(tier: Tier) -> None:
    again = tier.emu.compile_many(list(tier.compiled))
    assert [k.path for k in again] == [k.path for k in tier.compiled.values()]
    distinct = {k.source_hash for p in tier.prepared.values() for k in itertools.chain(
        p.kernels.values(), (c[0] for c in p.copies))}
    assert len(distinct) == len({k.path for k in tier.compiled.values()})
