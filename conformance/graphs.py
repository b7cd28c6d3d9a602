"""Graph cases of the conformance rosters: elementwise ops, broadcasting views, fused chains and
MLP blocks, each one program run on tgrad and on the oracles.

A `GraphCase` is (id, family, program, operands, fuses, seed). ``program`` names a function of
PROGRAMS, ``(F, *operands) -> result``, written once with tgrad's surface (``@``, ``+``, ``x.relu()``,
``F.silu(x)``, ``F.gelu(x, approximate="tanh")``, ``F.ops.apply(name, ...)``, Python numbers as
operands): ``F = tgrad`` runs it on Tensors, ``F = conformance.reference.REF`` on `Ref` values,
whose every op is the oracle's. Each operand is (logical shape, view kind, fill): the view kinds
are conformance.rosters' (``plain`` for any rank, the 2-D kinds of VIEW_KINDS for a 2-D operand),
so an operand is built from a seeded base array through real views, tgrad's and numpy's alike.
``fuses`` says the scheduler has something to fuse (a matmul with an elementwise reader, or a
chain): with fusion on, explain must show a fused op, so the fused/unfused comparison is not
vacuous.

Families:

- ``elementwise``: every registry op on special values (every NaN class, infinities, zeros,
  subnormals, huge and tiny), on every bf16 pattern (unary ops: a [256, 256] operand of all 65,536)
  and on random data; binary ops also on ordinary against wide-exponent operands.
- ``broadcast``: 0-d operands and Python numbers, size-1 axes (a row, a column, an outer product,
  3-D), transposed, sliced, negative-step, permuted and expanded (stride-0) operands, an empty
  result, unary ops on views.
- ``fused``: matmul + bias + gelu (erf and tanh, each route: one row, a few rows, gemm), matmul
  chains with elementwise ops between, elementwise chains, a SiLU-gated product, an intermediate
  with two readers (not fusable), special values through an epilogue.
- ``mlp``: torchlens' tutorial MLP, a GELU MLP and a LLaMA-style SiLU-gated MLP at small shapes
  (M = 1, 5, 32, 64; the last above the single-thread threshold, so its kernels run threaded);
  the "full" roster adds larger blocks.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .elementwise import ARITY, BINARY_OPS, UNARY_OPS
from .fills import FILLS, fill_bits
from .rosters import VIEW_KINDS, apply_view_ops, base_shape, view_ops

__all__ = ["GraphCase", "PROGRAMS", "build_graph_operands", "graph_roster", "reference_bits"]

Operand = tuple[tuple[int, ...], str, str]  # (logical shape, view kind, fill)


@dataclass(frozen=True)
class GraphCase:
    id: str
    family: str
    program: str
    operands: tuple[Operand, ...]
    fuses: bool = False
    seed: int = 0


# ---- programs ----------------------------------------------------------------------------------------


def _unary(name: str) -> Callable[..., Any]:
    return lambda F, x: F.ops.apply(name, x)


def _binary(name: str) -> Callable[..., Any]:
    return lambda F, a, b: F.ops.apply(name, a, b)


PROGRAMS: dict[str, Callable[..., Any]] = {
    **{f"op.{name}": _unary(name) for name in UNARY_OPS},
    **{f"op.{name}": _binary(name) for name in BINARY_OPS},
    # broadcasting and numbers
    "add": lambda F, a, b: a + b,
    "mul": lambda F, a, b: a * b,
    "sub": lambda F, a, b: a - b,
    "div": lambda F, a, b: a / b,
    "maximum": lambda F, a, b: F.maximum(a, b),
    "minimum": lambda F, a, b: F.minimum(a, b),
    "numbers": lambda F, x: F.maximum(1 - 2 * x / 3.0, 0.0) + 0.1,
    "halve": lambda F, x: x * 0.5,
    "gelu_of_view": lambda F, x: F.gelu(x),
    "exp_of_view": lambda F, x: x.exp(),
    "abs_then_rsqrt": lambda F, x: abs(x).rsqrt(),
    # fused chains
    "linear_gelu": lambda F, x, w, b: F.gelu(x @ w + b),
    "linear_gelu_tanh": lambda F, x, w, b: F.gelu(x @ w + b, approximate="tanh"),
    "linear_relu": lambda F, x, w, b: (x @ w + b).relu(),
    "scaled_residual": lambda F, x, w, s, r: (x @ w) * s + r,
    "matmul_relu_matmul_silu": lambda F, x, w1, w2: ((x @ w1).relu() @ w2).silu(),
    "matmul_tanh_matmul_add": lambda F, x, w1, w2, b: (x @ w1).tanh() @ w2 + b,
    "elementwise_chain": lambda F, x, y, z: ((x * y + z).sigmoid() - 0.5).square(),
    "gated": lambda F, x, g, u: F.silu(x @ g) * (x @ u),
    "two_readers": lambda F, x, w, b: _two_readers(F, x, w, b),
    "clamp_chain": lambda F, x, w: F.minimum(F.maximum(x @ w, -1.0), 1.0).neg(),
    # MLP blocks (weights [out, in], as torch.nn.Linear holds them)
    "mlp_relu": lambda F, x, w1, b1, w2, b2: (x @ w1.T + b1).relu() @ w2.T + b2,
    "mlp_gelu": lambda F, x, w1, b1, w2, b2: F.gelu(x @ w1.T + b1) @ w2.T + b2,
    "mlp_gelu_tanh": lambda F, x, w1, b1, w2, b2: F.gelu(x @ w1.T + b1, approximate="tanh") @ w2.T + b2,
    "mlp_silu_gated": lambda F, x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d.T,
}


def _two_readers(F: Any, x: Any, w: Any, b: Any) -> Any:
    h = x @ w  # read by the add and by the last mul: it must be stored, not fused away
    return (h + b).relu() * h


# ---- operands --------------------------------------------------------------------------------------


def _base(shape: tuple[int, ...], view: str) -> tuple[int, ...]:
    if view == "plain":
        return shape
    if len(shape) != 2:
        raise ValueError(f"view {view!r} needs a 2-D operand, got shape {shape}")
    return base_shape(view, *shape)


def _ops_of(shape: tuple[int, ...], view: str) -> list[tuple[Any, ...]]:
    return [] if view == "plain" else view_ops(view, *shape)


def build_graph_operands(case: GraphCase) -> tuple[list[np.ndarray], Callable[[Any, int], Any]]:
    """(bases, apply_view): seeded ml_dtypes.bfloat16 base arrays, one per operand, and
    ``apply_view(x, i)`` turning base i (numpy, or a tgrad Tensor made from it) into operand i."""
    import ml_dtypes

    bases = []
    for i, (shape, view, fill) in enumerate(case.operands):
        rng = np.random.default_rng([case.seed, i])
        bases.append(fill_bits(fill, _base(shape, view), rng).view(ml_dtypes.bfloat16))

    def apply_view(x: Any, i: int) -> Any:
        shape, view, _ = case.operands[i]
        return apply_view_ops(x, _ops_of(shape, view))

    return bases, apply_view


def reference_bits(case: GraphCase) -> np.ndarray:
    """The case's result by the oracles: uint16 bf16 bits."""
    from .reference import REF, Ref

    bases, apply_view = build_graph_operands(case)
    operands = [Ref(apply_view(base.view(np.uint16), i)) for i, base in enumerate(bases)]
    return np.asarray(PROGRAMS[case.program](REF, *operands).bits, dtype=np.uint16)


# ---- rosters ---------------------------------------------------------------------------------------


def _seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "0d"


def _case(family: str, program: str, operands: list[Operand], fuses: bool = False,
          label: str = "") -> GraphCase:
    parts = [family, label or program]
    parts.append("-".join(f"{_shape_text(s)}{'' if v == 'plain' else '.' + v}.{f}" for s, v, f in operands))
    case_id = "-".join(parts)
    return GraphCase(case_id, family, program, tuple(operands), fuses, _seed(case_id))


def _elementwise() -> list[GraphCase]:
    cases = []
    for name in UNARY_OPS:
        for shape, fill in (((33, 65), "special"), ((256, 256), "allbits"), ((17, 9), "normal")):
            cases.append(_case("elementwise", f"op.{name}", [(shape, "plain", fill)], label=name))
    for name in BINARY_OPS:
        # the derivative ops (no GPU spelling: skipped on GPU backends, where skips count against
        # the claim) take two of the three fills; all their bf16 pairs are proven in C
        fills = (("special", "special"), ("normal", "exponents"), ("tiny", "ties"))
        for fa, fb in fills if not name.endswith("_backward") else fills[::2]:
            operands = [((33, 65), "plain", fa), ((33, 65), "plain", fb)]
            cases.append(_case("elementwise", f"op.{name}", operands, label=name))
    return cases


def _broadcast() -> list[GraphCase]:
    n = "normal"
    spec: list[tuple[str, list[Operand]]] = [
        ("add", [((17, 31), "plain", n), ((), "plain", n)]),               # a 0-d operand
        ("div", [((), "plain", "special"), ((17, 31), "plain", "special")]),
        ("mul", [((17, 1), "plain", n), ((1, 31), "plain", n)]),            # outer product
        ("add", [((17, 31), "plain", n), ((31,), "plain", n)]),             # a row
        ("sub", [((17, 31), "plain", "special"), ((17, 1), "plain", "special")]),  # a column
        ("maximum", [((4, 1, 6), "plain", n), ((5, 1), "plain", n)]),       # 3-D both ways
        ("add", [((32, 48), "transpose", n), ((32, 48), "plain", n)]),
        ("mul", [((32, 48), "slice2", n), ((32, 48), "negstep", n)]),
        ("minimum", [((33, 45), "slice_offset", "special"), ((33, 45), "transpose_slice2", "special")]),
        ("sub", [((40, 24), "expand", n), ((40, 24), "permute", n)]),       # stride 0, permuted
        ("div", [((24, 40), "negstep_transpose", n), ((24, 40), "expand", "exponents")]),
        ("add", [((0, 5), "plain", n), ((5,), "plain", n)]),                # empty
        ("numbers", [((17, 31), "plain", n)]),
        ("halve", [((33, 65), "plain", "special")]),
        ("gelu_of_view", [((48, 32), "transpose_slice2", n)]),
        ("exp_of_view", [((32, 48), "expand", n)]),
        ("abs_then_rsqrt", [((31, 17), "negstep_rows", "special")]),
    ]
    return [_case("broadcast", program, operands) for program, operands in spec]


def _fused() -> list[GraphCase]:
    n = "normal"
    cases = []
    for m in (1, 5, 64):  # the rowvec, skinny and gemm routes
        for program in ("linear_gelu", "linear_gelu_tanh"):
            operands = [((m, 96), "plain", n), ((96, 80), "plain", n), ((80,), "plain", n)]
            cases.append(_case("fused", program, operands, fuses=True))
    more: list[tuple[str, list[Operand]]] = [
        ("linear_relu", [((48, 64), "plain", n), ((64, 40), "transpose", n), ((48, 1), "plain", n)]),
        ("linear_gelu", [((16, 32), "plain", "special"), ((32, 24), "plain", "special"),
                         ((24,), "plain", "special")]),
        ("scaled_residual", [((40, 64), "plain", n), ((64, 48), "plain", n), ((), "plain", n),
                             ((40, 48), "plain", n)]),
        ("matmul_relu_matmul_silu", [((24, 64), "plain", n), ((64, 96), "plain", n), ((96, 32), "plain", n)]),
        ("matmul_tanh_matmul_add", [((3, 64), "plain", n), ((64, 48), "slice2", n),
                                    ((48, 40), "plain", n), ((40,), "plain", n)]),
        ("elementwise_chain", [((33, 65), "plain", n), ((33, 65), "transpose", n), ((65,), "plain", n)]),
        ("gated", [((16, 64), "plain", n), ((64, 96), "plain", n), ((64, 96), "plain", n)]),
        ("two_readers", [((32, 48), "plain", n), ((48, 40), "plain", n), ((40,), "plain", n)]),
        ("clamp_chain", [((20, 50), "plain", n), ((50, 30), "plain", n)]),
    ]
    cases += [_case("fused", program, operands, fuses=True) for program, operands in more]
    return cases


def _mlp_operands(program: str, m: int, d: int, h: int) -> list[Operand]:
    n = "normal"
    if program == "mlp_silu_gated":
        return [((m, d), "plain", n), ((h, d), "plain", n), ((h, d), "plain", n), ((d, h), "plain", n)]
    return [((m, d), "plain", n), ((h, d), "plain", n), ((h,), "plain", n), ((d, h), "plain", n),
            ((d,), "plain", n)]


def _mlp(sizes: tuple[tuple[int, int, int], ...]) -> list[GraphCase]:
    programs = ("mlp_relu", "mlp_gelu", "mlp_gelu_tanh", "mlp_silu_gated")
    return [_case("mlp", program, _mlp_operands(program, m, d, h), fuses=True)
            for m, d, h in sizes for program in programs]


CI_MLP_SIZES = ((1, 64, 256), (5, 64, 128), (32, 128, 256), (64, 256, 512))  # the last one threaded
FULL_MLP_SIZES = CI_MLP_SIZES + ((1, 512, 1408), (16, 512, 2048), (128, 256, 1024))


def graph_roster(name: str) -> list[GraphCase]:
    """The graph cases of a named roster ("ci" or "full"); ids are unique."""
    if name not in ("ci", "full"):
        raise ValueError(f"unknown roster {name!r}; known: ci, full")
    sizes = CI_MLP_SIZES if name == "ci" else FULL_MLP_SIZES
    cases = _elementwise() + _broadcast() + _fused() + _mlp(sizes)
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert all(f in FILLS for c in cases for _, _, f in c.operands)
    assert all(v in VIEW_KINDS for c in cases for _, v, _ in c.operands)
    assert all(c.program in PROGRAMS for c in cases) and set(ARITY) <= {
        c.program[3:] for c in cases if c.family == "elementwise"}
    return cases
