"""Reduction cases for the GPU routes: each one reduction (``tgrad.sum``, ``mean``, ``max``,
``min``, ``argmax``, ``argmin``) of one operand, read through a real view, on adversarial data,
with elementwise ops fused into its read (a prologue) or its store (an epilogue) where the case
says so. The CPU's bytes are the reference: its sums and means are proved correctly rounded, and
its extrema exact, against the exact rational oracle (tests/python/test_reduce_exact.py,
test_reductions.py), so a device that matches them byte for byte is correct too.

A `ReductionCase` is (id, op, shape, view, axis, keepdims, dtype, out_dtype, fill, program):
- ``view`` is a 2-D view kind of conformance.rosters (``plain`` for any rank, ``permute3`` moves
  the last axis of a 3-D base to the front);
- ``dtype`` the operand's (``bfloat16`` or ``float32``), ``out_dtype`` the result's (None: the
  default; argmax/argmin give int32);
- ``fill`` one of FILLS: ``normal``, ``cancel`` (huge values of both signs that cancel, and
  small ones), ``special`` (NaN, infinities, zeros of both signs, subnormals, the largest finite),
  ``subnormal``, ``overflow`` (sums past the largest finite), ``ties`` (small integers, many
  equal, and -0 with +0), ``negzero`` (every value -0: the sum is -0), ``rising`` (strictly
  increasing in memory order, in bf16 too: a row's maximum is its last element), ``bits`` (any
  pattern);
- ``program`` one of PROGRAMS: ``plain`` (the reduction alone), ``square`` (of x * x, fused into
  its read), ``abs`` (of |x|), ``rsqrt_eps`` (rsqrt(r + 1e-5), fused into its store), ``scale``
  (r * 0.5 - 1, two ops in the store).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .rosters import apply_view_ops, base_shape, view_ops

__all__ = ["FILLS", "PROGRAMS", "ReductionCase", "build", "reduction_roster"]

FILLS = ("normal", "cancel", "special", "subnormal", "overflow", "ties", "negzero", "rising", "bits")


@dataclass(frozen=True)
class ReductionCase:
    id: str
    op: str
    shape: tuple[int, ...]
    view: str
    axis: int | tuple[int, ...] | None
    keepdims: bool
    dtype: str
    out_dtype: str | None
    fill: str
    program: str = "plain"

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())


def _pre(program: str) -> Callable[[Any], Any]:
    return {"square": lambda x: x * x, "abs": lambda x: abs(x)}.get(program, lambda x: x)


def _post(program: str) -> Callable[[Any], Any]:
    return {"rsqrt_eps": lambda r: (r + 1e-5).rsqrt(), "scale": lambda r: r * 0.5 - 1.0}.get(program, lambda r: r)


PROGRAMS = ("plain", "square", "abs", "rsqrt_eps", "scale")
FUSES = {"square": "prologue", "abs": "prologue", "rsqrt_eps": "epilogue", "scale": "epilogue"}


def _f32_bits(fill: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n float32 values of a fill, as uint32 bits."""
    sign = rng.integers(0, 2, n, dtype=np.uint32) << np.uint32(31)
    if fill == "normal":
        return rng.standard_normal(n).astype(np.float32).view(np.uint32)
    if fill == "cancel":
        big = np.float32(rng.choice([1e30, 3e38, 1.5e20], n)) * np.where(rng.random(n) < 0.5, 1, -1)
        v = np.where(rng.random(n) < 0.6, big, rng.standard_normal(n)).astype(np.float32)
        if n >= 3:  # 1e30 + 1 - 1e30, where a sum in order would lose the 1
            v[:3] = [1e30, 1.0, -1e30]
        return v.view(np.uint32)
    if fill == "special":
        choices = np.array([0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x807FFFFF,
                            0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0x00800000], dtype=np.uint32)
        v = choices[rng.integers(0, len(choices), n)]
        return np.where(rng.random(n) < 0.5, v, rng.standard_normal(n).astype(np.float32).view(np.uint32))
    if fill == "subnormal":
        return sign | rng.integers(0, 1 << 23, n, dtype=np.uint32) & np.uint32(0x807FFFFF)
    if fill == "overflow":
        return np.uint32(0x7F000000) | rng.integers(0, 1 << 23, n, dtype=np.uint32)
    if fill == "ties":
        v = rng.integers(-3, 4, n).astype(np.float32).view(np.uint32)
        return np.where(v == 0, sign, v)
    if fill == "negzero":
        return np.full(n, 0x80000000, np.uint32)
    if fill == "rising":
        return np.uint32(0x3F800000) + (np.arange(n, dtype=np.uint32) % np.uint32(0x3F00) << np.uint32(16))
    if fill == "bits":
        return rng.integers(0, 1 << 32, n, dtype=np.uint32)
    raise ValueError(f"unknown fill {fill!r}; known: {', '.join(FILLS)}")


def base_array(case: ReductionCase) -> np.ndarray:
    """The seeded base array (numpy; bf16 as ml_dtypes.bfloat16, f32 as float32) that the case's
    view turns into its operand."""
    import ml_dtypes

    shape = _base_shape(case)
    n = int(np.prod(shape))
    bits = _f32_bits(case.fill, n, np.random.default_rng(case.seed))
    if case.dtype == "float32":
        return bits.view(np.float32).reshape(shape)
    # the top 16 bits, NaN kept a NaN (a truncated NaN payload may read as inf)
    b16 = (bits >> np.uint32(16)).astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    b16[nan] = (b16[nan] & np.uint16(0x8000)) | np.uint16(0x7FC0)
    return b16.view(ml_dtypes.bfloat16).reshape(shape)


def _base_shape(case: ReductionCase) -> tuple[int, ...]:
    if case.view == "plain":
        return case.shape
    if case.view == "permute3":
        a, b, c = case.shape
        return (b, c, a)
    return base_shape(case.view, *case.shape)


def operand(case: ReductionCase, base: Any) -> Any:
    """The case's operand: its view of `base` (a tgrad Tensor or a numpy array)."""
    if case.view == "plain":
        return base
    if case.view == "permute3":
        return base.permute(2, 0, 1) if not isinstance(base, np.ndarray) else np.transpose(base, (2, 0, 1))
    return apply_view_ops(base, view_ops(case.view, *case.shape))


def build(tgrad: Any, case: ReductionCase, x: Any) -> Any:
    """The case's program on operand x (a tgrad Tensor): the pending result."""
    kw: dict[str, Any] = {"axis": case.axis, "keepdims": case.keepdims}
    if case.out_dtype is not None:
        kw["dtype"] = getattr(tgrad, case.out_dtype)
    if case.op.startswith("arg"):
        kw.pop("dtype", None)
    r = getattr(tgrad, case.op)(_pre(case.program)(x), **kw)
    return _post(case.program)(r)


def _case(op: str, shape: tuple[int, ...], view: str, axis: Any, fill: str, dtype: str = "bfloat16",
          out_dtype: str | None = None, keepdims: bool = False, program: str = "plain") -> ReductionCase:
    ax = "all" if axis is None else (".".join(map(str, axis)) if isinstance(axis, tuple) else str(axis))
    parts = [op, "x".join(map(str, shape)), view, f"ax{ax}", fill, "bf16" if dtype == "bfloat16" else "f32"]
    if out_dtype:
        parts.append(f"to_{out_dtype}")
    if keepdims:
        parts.append("keep")
    if program != "plain":
        parts.append(program)
    return ReductionCase("-".join(parts), op, shape, view, axis, keepdims, dtype, out_dtype, fill, program)


def _random_cases(n: int) -> list[ReductionCase]:
    """n seeded random cases: rank 1 to 4, extents 1 to 9 (a 3-D one sometimes permuted, a 2-D one
    through a random view kind), a random set of axes (or every axis), keepdims, op, dtypes, fill."""
    rng = np.random.default_rng(2026)
    views2 = ("plain", "transpose", "slice2", "slice_offset", "negstep", "negstep_rows", "expand", "negstep_transpose")
    ops = ("sum", "mean", "max", "min", "argmax", "argmin")
    out = []
    while len(out) < n:
        rank = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 10, rank))
        view = "plain"
        if rank == 2:
            view = str(rng.choice(views2))
        elif rank == 3 and rng.random() < 0.5:
            view = "permute3"
        op = str(rng.choice(ops))
        if op.startswith("arg"):
            axis: Any = None if rng.random() < 0.3 else int(rng.integers(-rank, rank))
        else:
            k = int(rng.integers(0, rank + 1))
            axis = None if k == 0 else tuple(sorted(int(a) for a in rng.choice(rank, k, replace=False)))
        dtype = str(rng.choice(["bfloat16", "float32"]))
        out_dtype = "float32" if not op.startswith("arg") and rng.random() < 0.3 else None
        case = _case(op, shape, view, axis, str(rng.choice(FILLS)), dtype=dtype, out_dtype=out_dtype,
                     keepdims=bool(rng.random() < 0.3))
        if all(c.id != case.id for c in out):
            out.append(case)
    return out


def reduction_roster(name: str = "ci") -> list[ReductionCase]:
    """The reduction cases of a roster: "core" (a few, for the core tier's PoCL run), "ci" (every
    op, dtype, fill, view kind and fusion, at small shapes, and 24 seeded random shapes, axes and
    views), "full" (ci plus long rows)."""
    if name not in ("core", "ci", "full"):
        raise ValueError(f"unknown roster {name!r}; known: core, ci, full")
    core = [
        _case("sum", (5, 300), "plain", 1, "cancel"),
        _case("mean", (7, 33), "transpose", 0, "special", dtype="float32"),
        _case("sum", (4, 6, 65), "plain", (0, 2), "subnormal", out_dtype="float32"),
        _case("max", (33, 17), "negstep", None, "ties"),
        _case("argmin", (9, 70), "slice2", 1, "special", dtype="float32"),
        _case("sum", (3, 130), "plain", -1, "negzero", keepdims=True),
        _case("sum", (6, 200), "plain", 1, "normal", program="square"),
        _case("mean", (6, 200), "plain", 1, "normal", program="rsqrt_eps"),
    ]
    if name == "core":
        return core
    cases = list(core)
    for op in ("sum", "mean", "max", "min", "argmax", "argmin"):
        for dtype in ("bfloat16", "float32"):
            for fill in FILLS:
                cases.append(_case(op, (6, 131), "plain", 1, fill, dtype=dtype))
            cases.append(_case(op, (40, 3), "transpose", 1, "special", dtype=dtype))
            cases.append(_case(op, (3, 5, 7), "permute3", 0, "ties", dtype=dtype))
            cases.append(_case(op, (17, 9), "expand", 0, "normal", dtype=dtype))
            cases.append(_case(op, (11, 13), "slice_offset", None, "cancel", dtype=dtype))
            cases.append(_case(op, (0, 4), "plain", 1, "normal", dtype=dtype))  # an empty result
        if not op.startswith("arg"):
            cases.append(_case(op, (4, 97), "negstep_rows", 1, "special", out_dtype="float32"))
            cases.append(_case(op, (2, 3, 4, 5), "plain", (1, 3), "overflow", keepdims=True))
    for op in ("sum", "mean"):
        cases.append(_case(op, (5, 0), "plain", 1, "normal"))  # nothing to sum: +0, and NaN for mean
        cases.append(_case(op, (1, 3000), "plain", None, "cancel", dtype="float32"))
    for op in ("sum", "mean", "max", "argmax"):
        for program in ("square", "abs", "rsqrt_eps", "scale"):
            if op.startswith("arg") and program in ("rsqrt_eps", "scale"):
                continue  # an int32 result has no elementwise readers
            cases.append(_case(op, (9, 75), "transpose", 1, "special", program=program))
    cases += _random_cases(24)
    if name == "full":
        cases.append(_case("sum", (2, 100_000), "plain", 1, "cancel"))
        cases.append(_case("mean", (1, 65_537), "plain", None, "normal", dtype="float32"))
        cases.append(_case("argmax", (3, 40_000), "plain", 1, "ties"))
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return cases
