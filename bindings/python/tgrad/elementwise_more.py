"""More elementwise ops with torch's names: sqrt, log, log1p, sin, cos, pow, clamp / clip.

    y = x.sqrt() + x.log1p()
    z = x ** 2, 2 ** x, tgrad.pow(x, w)
    tgrad.clamp(x, min=-1.0, max=1.0)

sqrt, log, log1p, sin, cos and pow are registry ops (TGRAD_OP_LIST codes 18-23), run through
tgrad.ops like the others: lazy, fused, numpy broadcasting, every element the correctly rounded
bf16 (or float32) of the exact result (docs/numerics.md). pow has C99 / IEEE 754 pow's special
cases, which torch.pow shares: pow(x, 0) = 1 and pow(1, y) = 1 even for NaN, a negative base to a
non-integer exponent is NaN, pow(-2, 3) = -8. A number operand becomes a 0-d tensor of the other
operand's dtype (tgrad.ops' rule): `x ** 0.3` on a bf16 tensor raises x to bf16(0.3) = 0.30078125,
where torch keeps the exponent in float32.

clamp (alias clip) is a composition of the exact ops maximum and minimum, so its bytes are those
of `minimum(maximum(x, min), max)`: NaN in x, min or max propagates, min > max gives max (torch's
rule), and -0 orders below +0 (IEEE 754-2019 maximum and minimum). Under tgrad.trace it is
recorded as those ops.
"""

from __future__ import annotations

from typing import Any, TypeVarTuple, Unpack

from . import errors
from .ops import Operand, _binary, _unary
from .tensor import Tensor

__all__ = ["clamp", "clip", "cos", "log", "log1p", "pow", "sin", "sqrt"]

_Shape = TypeVarTuple("_Shape")


def sqrt(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """√x (sqrt(-0) = -0, NaN below 0)."""
    return _unary("sqrt", x)


def log(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """The natural logarithm (log(±0) = -inf, NaN below 0)."""
    return _unary("log", x)


def log1p(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """log(1 + x), of the exact 1 + x (log1p(-1) = -inf, NaN below -1)."""
    return _unary("log1p", x)


def sin(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """sin(x) of the exact x, for every x up to bf16's largest (sin(±inf) = NaN)."""
    return _unary("sin", x)


def cos(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """cos(x) of the exact x (cos(±inf) = NaN)."""
    return _unary("cos", x)


def pow(input: Operand, exponent: Operand) -> Tensor:  # noqa: A001 - torch's name
    """input ** exponent, elementwise with broadcasting (torch.pow): either may be a number."""
    return _binary("pow", input, exponent)


def clamp(input: Tensor, min: Operand | None = None, max: Operand | None = None) -> Tensor:  # noqa: A002
    """Each element limited to [min, max] (torch.clamp): minimum(maximum(input, min), max), either
    bound omitted; NaN propagates, min > max gives max. Both omitted: InvalidArgumentError."""
    if not isinstance(input, Tensor):
        raise errors.InvalidArgumentError(f"clamp: expected a Tensor, got {type(input).__name__}")
    if min is None and max is None:
        raise errors.InvalidArgumentError("clamp: at least one of min and max must be given")
    out: Any = input
    if min is not None:
        out = _binary("maximum", out, min)
    if max is not None:
        out = _binary("minimum", out, max)
    return out  # type: ignore[no-any-return]


#: numpy's and torch's other name for clamp.
clip = clamp
