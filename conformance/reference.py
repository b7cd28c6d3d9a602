"""`Ref`: bf16 bits with tgrad.Tensor's op surface, computed by the oracles (no libtgrad).

A graph case of the conformance rosters is one program text, such as
``lambda F, x, w1, b1, w2, b2: (x @ w1.T + b1).relu() @ w2.T + b2``, run twice: on tgrad Tensors
with ``F = tgrad``, and on `Ref` values with ``F = REF``. Each op here is the contract's: ``@`` is
``conformance.oracle.matmul_bits`` (2-D), every elementwise op
``conformance.elementwise.elementwise_bits`` with numpy broadcasting, and a Python number operand
is a 0-d bf16 rounded once to nearest even from its float64 value, as tgrad rounds it. Each op's
result is a bf16 value, as in eager torch and tgrad: ``x @ w + b`` rounds the product, then the
sum. Views (``.T``, ``[...]``, ``reshape``, ``expand``, ``permute``) are numpy's.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from .elementwise import ARITY, elementwise_bits, scalar_bits
from .oracle import matmul_bits

__all__ = ["REF", "Ref"]

_GELU = {"none": "gelu", "tanh": "gelu_tanh"}


def _bits(value: Any) -> np.ndarray:
    """An operand's bits: a Ref's, or a Python number's as a 0-d bf16."""
    if isinstance(value, Ref):
        return value.bits
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return scalar_bits(float(value))
    raise TypeError(f"a Ref operand must be a Ref or a real number, got {type(value).__name__}")


def _shape_args(values: Sequence[Any]) -> tuple[int, ...]:
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        values = values[0]
    return tuple(operator.index(v) for v in values)


class Ref:
    """bf16 bit patterns (a uint16 array of any shape) that compute like a tgrad Tensor."""

    __array_ufunc__ = None  # ndarray + Ref must come here, as it does for a Tensor

    def __init__(self, bits: Any) -> None:
        self.bits = np.asarray(bits, dtype=np.uint16)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.bits.shape)

    def __repr__(self) -> str:
        return f"Ref(shape={self.shape})"

    # ---- views ------------------------------------------------------------------------------------
    @property
    def T(self) -> Ref:  # noqa: N802 - tgrad's name
        return Ref(self.bits.T)

    def transpose(self, axis0: int | None = None, axis1: int | None = None) -> Ref:
        if axis0 is None or axis1 is None:
            return self.T
        return Ref(np.swapaxes(self.bits, axis0, axis1))

    def permute(self, *axes: Any) -> Ref:
        return Ref(np.transpose(self.bits, _shape_args(axes)))

    def reshape(self, *shape: Any) -> Ref:
        return Ref(self.bits.reshape(_shape_args(shape)))

    def expand(self, *shape: Any) -> Ref:
        wanted = _shape_args(shape)
        lead = len(wanted) - self.bits.ndim
        full = tuple(self.bits.shape[i - lead] if s == -1 else s for i, s in enumerate(wanted))
        return Ref(np.broadcast_to(self.bits, full))

    def contiguous(self) -> Ref:
        return Ref(np.ascontiguousarray(self.bits))

    def __getitem__(self, key: Any) -> Ref:
        return Ref(self.bits[key])

    # ---- ops --------------------------------------------------------------------------------------
    def __matmul__(self, other: Ref) -> Ref:
        return Ref(matmul_bits(self.bits, other.bits))

    def __add__(self, other: Any) -> Ref:
        return REF.add(self, other)

    def __radd__(self, other: Any) -> Ref:
        return REF.add(other, self)

    def __sub__(self, other: Any) -> Ref:
        return REF.sub(self, other)

    def __rsub__(self, other: Any) -> Ref:
        return REF.sub(other, self)

    def __mul__(self, other: Any) -> Ref:
        return REF.mul(self, other)

    def __rmul__(self, other: Any) -> Ref:
        return REF.mul(other, self)

    def __truediv__(self, other: Any) -> Ref:
        return REF.div(self, other)

    def __rtruediv__(self, other: Any) -> Ref:
        return REF.div(other, self)

    def __neg__(self) -> Ref:
        return REF.neg(self)

    def __abs__(self) -> Ref:
        return REF.abs(self)

    def gelu(self, approximate: str = "none") -> Ref:
        return REF.gelu(self, approximate)

    def __getattr__(self, name: str) -> Any:
        """The other ops as methods, by their registry names: x.relu(), x.maximum(y), ..."""
        if name in ARITY and name != "gelu_tanh":
            return lambda *others: REF.apply(name, self, *others)
        raise AttributeError(name)


class _RefOps:
    """tgrad's functions over Ref values: ``REF.gelu(x, approximate="tanh")``, ``REF.maximum(a, 0)``,
    ``REF.ops.apply("gelu_tanh", x)``."""

    def apply(self, name: str, *operands: Any) -> Ref:
        return Ref(elementwise_bits(name, *(_bits(x) for x in operands)))

    @property
    def ops(self) -> _RefOps:  # tgrad.ops.apply's spelling
        return self

    def gelu(self, x: Ref, approximate: str = "none") -> Ref:
        return self.apply(_GELU[approximate], x)

    def __getattr__(self, name: str) -> Any:
        if name in ARITY and name != "gelu_tanh":
            return lambda *operands: self.apply(name, *operands)
        raise AttributeError(name)


#: The functions of the `tgrad` namespace a graph program calls, over Ref values.
REF: Any = _RefOps()
