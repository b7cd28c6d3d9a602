"""Named lists of conformance cases, and the operands each case describes.

A `Case` is (id, family, m, k, n, a_view, b_view, fill, seed). The left operand is the logical
[M, K] matrix, the right one [K, N]; each is derived from a *base* array through a view kind:

============== ===================== =====================================================
view kind      base shape (rows r,   view applied to the base
               cols c of the result)
============== ===================== =====================================================
plain          (r, c)                none
transpose      (c, r)                ``.T``
permute        (c, r)                ``.permute(1, 0)`` (numpy: ``transpose(1, 0)``)
slice2         (2r, 2c)              ``[::2, ::2]``
slice_offset   (r + 3, c + 5)        ``[1:1+r, 2:2+c]``
negstep        (r, c)                ``[::-1, ::-1]``
negstep_rows   (r, c)                ``[::-1]``
reshape_split  (r * c,)              ``.reshape(r, c)`` (1-D base split into rows)
expand         (1, c)                ``.expand(r, c)`` (numpy: ``broadcast_to``), stride 0
transpose_slice2 (2c, 2r)            ``.T[::2, ::2]``
negstep_transpose (c, r)             ``[::-1, ::-1].T``
============== ===================== =====================================================

`build_operands(case)` returns both bases (ml_dtypes.bfloat16 arrays, seeded) and
``apply_view(x, which)`` that applies the case's view for ``which`` in ("a", "b") to a numpy
array *or* a tgrad Tensor, with the same sequence of operations, so a runner builds the tgrad
operands through real tgrad views and the reference through numpy's.

`roster("ci")` runs in well under a minute on two cores (sentinels scaled down, everything else
small); `roster("full")` holds DESIGN §4's sentinel shapes at full size (the oracle needs minutes
for the largest; a runner may filter by family or size).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from .fills import FILLS, fill_bits

__all__ = ["Case", "VIEW_KINDS", "apply_view_ops", "base_shape", "build_operands", "roster",
           "roster_names", "view_ops"]


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    m: int
    k: int
    n: int
    a_view: str = "plain"
    b_view: str = "plain"
    fill: str = "normal"
    seed: int = 0

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


# ---- views ----------------------------------------------------------------------------------


def base_shape(kind: str, r: int, c: int) -> tuple[int, ...]:
    """The shape of the base array that view `kind` turns into an [r, c] operand."""
    return {
        "plain": (r, c),
        "transpose": (c, r),
        "permute": (c, r),
        "slice2": (2 * r, 2 * c),
        "slice_offset": (r + 3, c + 5),
        "negstep": (r, c),
        "negstep_rows": (r, c),
        "reshape_split": (r * c,),
        "expand": (1, c),
        "transpose_slice2": (2 * c, 2 * r),
        "negstep_transpose": (c, r),
    }[kind]


def view_ops(kind: str, r: int, c: int) -> list[tuple]:
    """The operations, in order, that turn the base of `kind` into an [r, c] operand."""
    return {
        "plain": [],
        "transpose": [("T",)],
        "permute": [("permute", (1, 0))],
        "slice2": [("getitem", (slice(None, None, 2), slice(None, None, 2)))],
        "slice_offset": [("getitem", (slice(1, 1 + r), slice(2, 2 + c)))],
        "negstep": [("getitem", (slice(None, None, -1), slice(None, None, -1)))],
        "negstep_rows": [("getitem", (slice(None, None, -1),))],
        "reshape_split": [("reshape", (r, c))],
        "expand": [("expand", (r, c))],
        "transpose_slice2": [("T",), ("getitem", (slice(None, None, 2), slice(None, None, 2)))],
        "negstep_transpose": [("getitem", (slice(None, None, -1), slice(None, None, -1))), ("T",)],
    }[kind]


VIEW_KINDS = (
    "plain", "transpose", "permute", "slice2", "slice_offset", "negstep", "negstep_rows",
    "reshape_split", "expand", "transpose_slice2", "negstep_transpose",
)


def apply_view_ops(x, ops):
    """Apply view_ops' operations to a numpy array or a tgrad Tensor (or a conformance Ref)."""
    is_numpy = isinstance(x, np.ndarray)
    for op in ops:
        if op[0] == "T":
            x = x.T
        elif op[0] == "permute":
            x = np.transpose(x, op[1]) if is_numpy else x.permute(*op[1])
        elif op[0] == "getitem":
            x = x[op[1]]
        elif op[0] == "reshape":
            x = x.reshape(op[1]) if is_numpy else x.reshape(*op[1])
        elif op[0] == "expand":
            x = np.broadcast_to(x, op[1]) if is_numpy else x.expand(*op[1])
        else:  # pragma: no cover - the table above is the only source of ops
            raise ValueError(f"unknown view op {op!r}")
    return x


# ---- operands -------------------------------------------------------------------------------


def build_operands(case: Case):
    """(a_base, b_base, apply_view) for a case; bases are seeded ml_dtypes.bfloat16 arrays.

    ``apply_view(x, "a")`` turns a_base (numpy or a tgrad Tensor built from it) into the [M, K]
    operand; ``apply_view(x, "b")`` turns b_base into the [K, N] operand.
    """
    import ml_dtypes

    rng_a = np.random.default_rng([case.seed, 0])
    rng_b = np.random.default_rng([case.seed, 1])
    a_base = fill_bits(case.fill, base_shape(case.a_view, case.m, case.k), rng_a)
    b_base = fill_bits(case.fill, base_shape(case.b_view, case.k, case.n), rng_b)
    ops = {"a": view_ops(case.a_view, case.m, case.k), "b": view_ops(case.b_view, case.k, case.n)}

    def apply_view(x, which: str):
        return apply_view_ops(x, ops[which])

    return a_base.view(ml_dtypes.bfloat16), b_base.view(ml_dtypes.bfloat16), apply_view


# ---- rosters --------------------------------------------------------------------------------

SENTINEL_SHAPES = [
    (64, 64, 64), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
    (8192, 1024, 1024), (4096, 1024, 1024), (2048, 1024, 1024),  # tall
    (1024, 1024, 8192), (1024, 1024, 4096), (1024, 1024, 2048),  # wide
]
BELOW_TILE_SHAPES = [(4, 4, 4), (8, 8, 4), (4, 32, 4), (6, 32, 6), (4, 4, 32)]
ODD_PRIME_SHAPES = [
    (1, 1, 1), (1, 2, 1), (2, 1, 2), (3, 5, 7), (17, 1, 19), (97, 101, 103), (127, 255, 511),
    (1, 1024, 1024), (1024, 1024, 1), (1, 257, 1), (31, 33, 63), (65, 127, 129),
    (255, 257, 129), (129, 63, 257), (7, 509, 11), (511, 3, 513),
]
EMPTY_SHAPES = [(0, 5, 3), (4, 0, 3), (4, 5, 0), (0, 0, 0), (0, 5, 0), (1, 0, 1)]
# DESIGN §7 anchors that are not sentinels (memory-bound and skinny shapes).
ANCHOR_SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (4096, 64, 4096)]

# Tgrad's 16 view cases: transposes of each and both operands, slice by 2, reshape split, expand
# of the right operand, negative steps, at sizes 32-128 (plus compositions of views).
VIEW_CASES = [
    ("transpose", "plain", (64, 64, 64)),
    ("plain", "transpose", (64, 64, 64)),
    ("transpose", "transpose", (64, 64, 64)),
    ("transpose", "plain", (96, 128, 32)),
    ("plain", "transpose", (32, 96, 128)),
    ("transpose", "transpose", (128, 32, 96)),
    ("slice2", "plain", (64, 64, 64)),
    ("plain", "slice2", (48, 80, 112)),
    ("slice2", "slice2", (128, 64, 32)),
    ("reshape_split", "plain", (64, 96, 64)),
    ("plain", "reshape_split", (32, 64, 128)),
    ("plain", "expand", (64, 64, 64)),
    ("plain", "expand", (96, 32, 128)),
    ("negstep", "plain", (64, 64, 64)),
    ("plain", "negstep", (64, 96, 32)),
    ("negstep_rows", "negstep_rows", (33, 65, 97)),
    # compositions and the remaining kinds
    ("permute", "permute", (40, 72, 56)),
    ("slice_offset", "slice_offset", (61, 67, 71)),
    ("transpose_slice2", "negstep_transpose", (48, 96, 64)),
    ("expand", "transpose", (32, 64, 48)),
    ("negstep_transpose", "slice2", (57, 33, 45)),
    ("transpose", "expand", (37, 19, 53)),
]

SPECIAL_CASES = [
    # (fill, shape): every fill, odd and even K (odd K exercises the +0 pad product)
    ("special", (64, 64, 64)), ("special", (17, 33, 9)), ("special", (5, 7, 3)),
    ("exponents", (64, 64, 64)), ("exponents", (31, 129, 17)), ("exponents", (4, 3, 4)),
    ("tiny", (64, 64, 64)), ("tiny", (9, 5, 13)), ("tiny", (33, 1, 33)),
    ("ties", (64, 64, 64)), ("ties", (23, 127, 29)),
    ("smallint", (64, 64, 64)), ("smallint", (127, 255, 511)), ("smallint", (3, 4097, 5)),
    ("normal", (8, 4096, 8)), ("normal", (8, 4095, 8)),
]


def _seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


def _shape_id(m, k, n) -> str:
    return f"{m}x{k}x{n}"


def _scaled(shape) -> tuple[int, int, int]:
    return tuple(max(64, d // 16) for d in shape)


def _case(family, shape, a_view="plain", b_view="plain", fill="normal", suffix="") -> Case:
    m, k, n = shape
    parts = [family]
    if (a_view, b_view) != ("plain", "plain"):
        parts.append(f"a.{a_view}-b.{b_view}")
    parts.append(_shape_id(m, k, n) + suffix)
    parts.append(fill)
    case_id = "-".join(parts)
    return Case(case_id, family, m, k, n, a_view, b_view, fill, _seed(case_id))


def _sentinels(scaled: bool) -> list[Case]:
    out = []
    for shape in SENTINEL_SHAPES:
        if scaled:  # the id names the sentinel and, honestly, the shape that actually runs
            small = _scaled(shape)
            case_id = f"sentinel-{_shape_id(*shape)}@scaled-{_shape_id(*small)}-normal"
            out.append(Case(case_id, "sentinel", *small, fill="normal", seed=_seed(case_id)))
        else:
            out.append(_case("sentinel", shape))
    return out


def _common(fills_for_small=("normal", "exponents", "smallint")) -> list[Case]:
    cases = []
    for shape in BELOW_TILE_SHAPES:
        for fill in fills_for_small:
            cases.append(_case("below_tile", shape, fill=fill))
    for a_view, b_view, shape in VIEW_CASES:
        cases.append(_case("views", shape, a_view, b_view))
    for a_view, b_view, shape in VIEW_CASES[:6]:
        cases.append(_case("views", shape, a_view, b_view, fill="special"))
    for shape in ODD_PRIME_SHAPES:
        cases.append(_case("odd_prime", shape))
    for shape in ODD_PRIME_SHAPES[:7]:
        cases.append(_case("odd_prime", shape, fill="special"))
    for shape in EMPTY_SHAPES:
        cases.append(_case("empty", shape))
    for shape in [(0, 5, 3), (4, 0, 3)]:
        cases.append(_case("empty", shape, "transpose", "slice2"))
    for fill, shape in SPECIAL_CASES:
        cases.append(_case("special_values", shape, fill=fill))
    return cases


def roster_names() -> list[str]:
    return ["ci", "full"]


def roster(name: str) -> list[Case]:
    """The cases of a named roster ("ci" or "full"); ids are unique."""
    if name == "ci":
        cases = _sentinels(scaled=True) + _common()
    elif name == "full":
        cases = _sentinels(scaled=False) + [_case("anchor", s) for s in ANCHOR_SHAPES] + _common()
    else:
        raise ValueError(f"unknown roster {name!r}; known: {roster_names()}")
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert all(c.fill in FILLS for c in cases)
    return cases


# ---- hand-computed examples of the numerics contract --------------------------------------------


@dataclass(frozen=True)
class Example:
    """One output C[0,0] = row a (K values) . column b (K values), with the expected bf16 bits, in
    the matmul order `order` (docs/numerics.md: "pairwise" or "block32").

    Values are given as float64 numbers that are exactly bf16, or as ints (raw bf16 patterns,
    for subnormals and NaN payloads).
    """

    id: str
    a: tuple
    b: tuple
    expected: int
    why: str
    order: str = "pairwise"

    def bits(self) -> tuple[np.ndarray, np.ndarray]:
        from .oracle import f64_to_bf16_bits

        def one(v):
            if isinstance(v, int):
                return np.uint16(v)
            return f64_to_bf16_bits(np.float64(v))

        a = np.array([one(v) for v in self.a], dtype=np.uint16).reshape(1, -1)
        b = np.array([one(v) for v in self.b], dtype=np.uint16).reshape(-1, 1)
        return a, b


_BIG = (2 - 2.0**-7) * 2.0**127  # largest finite bf16
CONTRACT_EXAMPLES = [
    Example("odd_element_first", (0.0, 1.0, -1.0, 2.0**-24), (1.0,) * 4, 0x0000,
            "order p1, p0, p3, p2: 1, 1, 1+2^-24 -> 1 (tie to even), 0; even-first gives 2^-24"),
    Example("odd_element_first_mirror", (1.0, 0.0, 2.0**-24, -1.0), (1.0,) * 4, 0x3380,
            "odd-first: 0, 1, 1 - 1 = 0, + 2^-24; even-first: 1, 1, 1 + 2^-24 -> 1, 1 - 1 = 0"),
    Example("rounded_each_addition", (1.0, 2.0**-24, 0.0, 2.0**-24, 0.0, 2.0**-24, 0.0, 2.0**-24),
            (1.0,) * 8, 0x3F80, "1 + 2^-24 rounds back to 1 four times; one rounding would not"),
    Example("tiny_product_flushes", (2.0**-70,), (2.0**-70,), 0x0000, "2^-140 is flushed to +0"),
    Example("tiny_negative_product_flushes_to_negative_zero", (-(2.0**-70), 0.0),
            (2.0**-70, 0.0), 0x8000, "odd p1 = +0, then -2^-140 flushes to -0"),
    Example("odd_k_pad_is_a_positive_zero_product", (-(2.0**-70), 0.0, -0.0), (2.0**-70, 0.0, 1.0),
            0x0000, "-0 after pair 0; pad +0 gives +0; p2 = -0 keeps +0 (no pad: -0)"),
    Example("subnormal_input_is_a_signed_zero", (0x8001, -(2.0**-70)), (2.0**100, 2.0**-70), 0x8000,
            "p1 = -2^-140 -> -0; p0 = (DAZ -0) * 2^100 = -0; (-0) + (-0) = -0; no DAZ: -2^-33"),
    Example("tininess_after_rounding_keeps", (-(2.0**-76), 2.0**-63), (2.0**-76, 2.0**-63), 0x0080,
            "2^-126 - 2^-152 rounds to 2^-126 with unbounded exponent: not tiny, kept"),
    Example("tininess_after_rounding_tie_keeps", (-(2.0**-75), 2.0**-63), (2.0**-76, 2.0**-63), 0x0080,
            "2^-126 - 2^-151 is the tie: to the even 2^-126, kept"),
    Example("tininess_after_rounding_flushes", (-1.5 * 2.0**-75, 2.0**-63), (2.0**-76, 2.0**-63),
            0x0000, "2^-126 - 3*2^-152 rounds to 2^-126 - 2^-150: tiny, flushed to +0"),
    Example("exact_cancellation_is_positive_zero", (1.0, -1.0), (1.0, 1.0), 0x0000, "x + (-x) = +0"),
    Example("nan_is_canonical", (0xFFA5, 1.0), (1.0, 1.0), 0x7FC0, "any NaN comes out as 0x7FC0"),
    Example("inf_times_zero_is_nan", (float("inf"), 0.0), (0.0, 1.0), 0x7FC0, "inf * 0"),
    Example("inf_minus_inf_is_nan", (float("inf"), float("inf")), (1.0, -1.0), 0x7FC0, "inf - inf"),
    Example("overflow_to_inf", (_BIG, _BIG), (_BIG, 0.0), 0x7F80, "big^2 overflows"),
    Example("overflowing_product_can_cancel", (2.0**64, -_BIG), (2.0**64, 1.0), 0x7B80,
            "-big + 2^128 = 2^120 exactly (the product alone overflows f32)"),
    Example("output_rounds_to_nearest_even", (1.0, 2.0**-8), (1.0, 1.0), 0x3F80,
            "1 + 2^-8 is the bf16 tie: to even 1.0"),
    Example("output_rounds_up_past_the_tie", (1.0, 2.0**-8, 2.0**-16, 0.0), (1.0, 1.0, 1.0, 0.0),
            0x3F81, "1 + 2^-8 + 2^-16 in f32, above the tie: 1 + 2^-7"),
    # the block32 order (the default since 0.2): the same rules per step, another order of steps
    Example("block32_even_and_odd_chains", (1.0, -1.0, 2.0**-24, 0.0), (1.0,) * 4, 0x0000,
            "even chain 1, 1 + 2^-24 -> 1 (tie to even); odd chain -1, -1; 1 + -1 = +0 (pairwise: 2^-24)",
            order="block32"),
    Example("block32_padding_makes_positive_zero", (-(2.0**-70),), (2.0**-70,), 0x0000,
            "even chain: -2^-140 flushes to -0, then the +0 products of the padding (k = 2..30) give "
            "(-0) + (+0) = +0 (pairwise: -0)", order="block32"),
    Example("block32_blocks_fold_in_order", (1.0,) + (0.0,) * 31 + (2.0**-8, 2.0**-16), (1.0,) * 34, 0x3F81,
            "block 0 gives 1; block 1: even 2^-8, odd 2^-16, t = 2^-8 + 2^-16; 1 + t in f32 is above "
            "the bf16 tie: 1 + 2^-7", order="block32"),
    Example("block32_padding_after_a_flushed_sum",
            (2.0**-60,) + (0.0,) * 31 + (-(2.0**-60),) + (0.0,) * 31 + (-(2.0**-70), -(2.0**-70)),
            (2.0**-60,) + (0.0,) * 31 + (2.0**-60 * (1 + 2.0**-7),) + (0.0,) * 31 + (2.0**-70, 2.0**-70), 0x0000,
            "block 0: acc = 2^-120; block 1: acc + -(2^-120 + 2^-127) flushes to -0; block 2: both chains "
            "flush to -0, then the padding's +0 products make them +0, so acc = -0 + +0 = +0 (without "
            "the padding: -0; pairwise: -0)", order="block32"),
]
