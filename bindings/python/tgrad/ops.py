"""Elementwise ops on Tensors: the unary and binary ops of libtgrad's op registry.

    y = (x @ w.T + b).gelu(approximate="tanh")
    z = tgrad.silu(x @ g) * (x @ u)
    x / 3.0, 1 - x, tgrad.maximum(x, 0)

Each op is one libtgrad call (tgrad_unary, tgrad_binary): lazy, numpy broadcasting through the
operands' views, every element the correctly rounded bf16 of the exact result (docs/numerics.md).
Python computes nothing. The op codes are read from the registry (TGRAD_OP_LIST) at import, so a
name is an op exactly when libtgrad says so; `apply(name, *operands)` reaches every op by its
registry name and the named functions below are spellings of it.

Operands are bfloat16 or float32 tensors; the op computes in float32 when either is float32 (a
bfloat16 operand is widened exactly: torch's promotion) and every element is correctly rounded to
the result's dtype. A Python or numpy real number as an operand becomes a 0-d tensor of the other
operand's dtype (a number never promotes, as in torch), rounded once to nearest even by libtgrad
as Tensor.from_numpy rounds (a float from its float64 value, a numpy float32 from its float32
value; bool counts as 0 or 1, as in torch and numpy). A complex number or a long
double is refused with DtypeUnsupportedError. Anything else is not an operand: the operators
return NotImplemented, so Python raises TypeError as it does for numpy arrays; the functions
raise InvalidArgumentError.

While tgrad.trace records, each op is reported with its registry name as its kind and its Tensor
operands, in call order, as its inputs; a number operand is first reported as a "constant" op
(the 0-d tensor it became), so a replay rebuilds it like any constant.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVarTuple, Union, Unpack, cast

import numpy as np

from . import _bf16, errors
from . import dtypes as _dtypes
from ._ffi import _string, lib
from .errors import _check
from .tensor import _RECORDER, Tensor, _new_handle, _reports

__all__ = [
    "OpInfo", "REGISTRY", "Scalar", "abs", "add", "apply", "div", "exp", "fusion_enabled", "gelu",
    "maximum", "minimum", "mul", "neg", "relu", "rsqrt", "set_fusion", "sigmoid", "silu", "square",
    "sub", "tanh",
]

#: A number that may stand for an operand (numpy scalars of these kinds too).
Scalar = Union[bool, int, float, np.bool_, np.integer[Any], np.floating[Any]]
#: A shape kept by a unary op (static checkers only: docs/typing.md).
_Shape = TypeVarTuple("_Shape")
#: An operand of a binary op.
Operand = Union[Tensor, Scalar]

_INT_BITS = 53  # float64's significand: ints up to 2^53 convert exactly


class OpInfo(NamedTuple):
    """One registry entry: the frozen op code and its arity (1 or 2)."""

    code: int
    arity: int


def _read_registry() -> dict[str, OpInfo]:
    return {_string(lib.tgrad_op_name(code)): OpInfo(code, int(lib.tgrad_op_arity(code)))
            for code in range(1, int(lib.tgrad_op_count()) + 1)}


#: The library's ops by name ("add" -> OpInfo(12, 2)), read from TGRAD_OP_LIST at import.
REGISTRY: dict[str, OpInfo] = _read_registry()


def _runner(name: str, info: OpInfo) -> Callable[..., Tensor]:
    """The call of one op on Tensor operands, reported to tgrad.trace under the op's name (its
    arguments are exactly the operands, so the trace records them as the op's inputs)."""
    if info.arity == 1:
        def run_unary(x: Tensor) -> Tensor:
            return Tensor._wrap(_new_handle(lib.tgrad_unary, info.code, x._h), x._shape)

        return _reports(name)(run_unary)

    def run_binary(a: Tensor, b: Tensor) -> Tensor:
        return Tensor._wrap(_new_handle(lib.tgrad_binary, info.code, a._h, b._h))

    return _reports(name)(run_binary)


_RUNNERS: dict[str, Callable[..., Tensor]] = {name: _runner(name, info) for name, info in REGISTRY.items()}


def _op(name: str, arity: int) -> Callable[..., Tensor]:
    """The runner of a registry op of that arity; InvalidArgumentError when there is none (an op
    this libtgrad does not have, as the C call answers an op code outside its registry)."""
    info = REGISTRY.get(name) if isinstance(name, str) else None
    if info is None:
        raise errors.InvalidArgumentError(
            f"op {name!r} is not in libtgrad's op registry ({', '.join(REGISTRY)})")
    if info.arity != arity:
        raise errors.InvalidArgumentError(f"op {name!r} takes {info.arity} operand(s), not {arity}")
    return _RUNNERS[name]


# ---- numbers as operands --------------------------------------------------------------------------
def _int_as_double(n: int) -> float:
    """A float64 that libtgrad's one rounding to bf16 takes to the same bf16 as the exact int.

    float(n) rounds past 2^53, and a second rounding to bf16 can then err at a tie (2^60 + 2^52 + 1
    would become the tie 2^60 + 2^52, then 2^60). Keeping the dropped bits as a sticky last bit
    (round to odd) leaves no tie that was not there; 53 bits are far more than bf16's 8 + 2 that
    this needs. Past float64's range, the largest float64 (bf16 rounds it to inf, as the int)."""
    magnitude = -n if n < 0 else n
    extra = magnitude.bit_length() - _INT_BITS
    if extra <= 0:
        return float(n)
    if magnitude.bit_length() > sys.float_info.max_exp:
        value = sys.float_info.max
    else:
        kept = magnitude >> extra
        if magnitude & ((1 << extra) - 1):
            kept |= 1
        value = math.ldexp(kept, extra)  # exact: a 53-bit integer scaled by a power of two
    return -value if n < 0 else value


def _host_array(value: object) -> np.ndarray[Any, Any] | None:
    """The 0-d host array a number stands for, in a dtype Tensor.from_numpy rounds once (float64,
    float32, bfloat16); None for something that is not a number."""
    if isinstance(value, (bool, np.bool_, np.integer)):
        value = int(value)
    if isinstance(value, int):
        return np.array(_int_as_double(value), np.float64)
    if isinstance(value, float):  # np.float64 too
        return np.array(value, np.float64)
    if isinstance(value, np.generic) and _bf16.is_bf16(value.dtype):
        return np.asarray(value)
    if isinstance(value, np.floating) and value.dtype in (np.float32, np.float16):
        return np.array(value, np.float32)  # float16 widens exactly; one rounding follows
    if isinstance(value, (complex, np.complexfloating, np.floating)):  # the rest: long double
        raise errors.DtypeUnsupportedError(
            f"a {type(value).__name__} operand is not supported (tgrad's elementwise ops are real "
            "bf16; numbers are rounded from int, float, numpy float16/32/64 or bfloat16)")
    return None


def _is_operand(value: object) -> bool:
    return isinstance(value, (Tensor, bool, int, float, complex, np.bool_, np.number)) or (
        isinstance(value, np.generic) and _bf16.is_bf16(value.dtype))


def _constant(value: object, name: str, like: Tensor) -> Tensor:
    """The 0-d tensor of a number in the dtype and on the device of the tensor it meets (torch's
    rule: a Python number does not promote a tensor; float32 and bfloat16 numbers are rounded once
    from their value), made by Tensor.from_numpy, so tgrad.trace records it as a "constant" op;
    InvalidArgumentError for anything else."""
    host = _host_array(value)
    if host is None:
        raise errors.InvalidArgumentError(
            f"{name}: an operand must be a Tensor or a real number, got {type(value).__name__}")
    if like.dtype is _dtypes.float32:
        return Tensor.from_numpy(host, device=like.device, dtype=_dtypes.float32)
    return Tensor.from_numpy(host, device=like.device)


# ---- applying ops ---------------------------------------------------------------------------------
def _unary(name: str, x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    run = _op(name, 1)
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"{name}: expected a Tensor, got {type(x).__name__}")
    return cast("Tensor[Unpack[_Shape]]", run(x))  # a unary op keeps the shape


def _binary(name: str, a: Operand, b: Operand) -> Tensor:
    run = _op(name, 2)
    if not (isinstance(a, Tensor) or isinstance(b, Tensor)):
        raise errors.InvalidArgumentError(
            f"{name}: at least one operand must be a Tensor, got {type(a).__name__} and {type(b).__name__}")
    made: list[Tensor] = []
    try:
        like = cast(Tensor, a if isinstance(a, Tensor) else b)  # one is a Tensor
        x = a if isinstance(a, Tensor) else _constant(a, name, like)
        if x is not a:
            made.append(x)
        y = b if isinstance(b, Tensor) else _constant(b, name, like)
        if y is not b:
            made.append(y)
        return run(x, y)
    finally:
        # The op's node holds the constant's buffer now (or the op failed): its handle can go at
        # once, unless tgrad.trace holds it as a recorded op until the trace has read it.
        if _RECORDER.get() is None:
            for t in made:
                t.release()


def apply(name: str, *operands: Operand) -> Tensor:
    """The registry op `name` ("add", "gelu_tanh", ...) on its operands; an op the library does
    not have, or the wrong number of operands, raises InvalidArgumentError."""
    if len(operands) == 1:
        return _unary(name, operands[0])  # type: ignore[arg-type]  # checked there
    if len(operands) == 2:
        return _binary(name, operands[0], operands[1])
    _op(name, len(operands))  # raises: every op takes 1 or 2
    raise errors.InvalidArgumentError(f"op {name!r}: no op takes {len(operands)} operands")


# ---- the ops by name (torch's names) --------------------------------------------------------------
def add(a: Operand, b: Operand) -> Tensor:
    """a + b, elementwise with broadcasting."""
    return _binary("add", a, b)


def sub(a: Operand, b: Operand) -> Tensor:
    """a - b, elementwise with broadcasting."""
    return _binary("sub", a, b)


def mul(a: Operand, b: Operand) -> Tensor:
    """a * b, elementwise with broadcasting."""
    return _binary("mul", a, b)


def div(a: Operand, b: Operand) -> Tensor:
    """a / b, elementwise with broadcasting (x / ±0 = ±inf, 0 / 0 = NaN)."""
    return _binary("div", a, b)


def maximum(a: Operand, b: Operand) -> Tensor:
    """IEEE 754-2019 maximum: NaN if either is NaN; maximum(-0, +0) = +0."""
    return _binary("maximum", a, b)


def minimum(a: Operand, b: Operand) -> Tensor:
    """IEEE 754-2019 minimum: NaN if either is NaN; minimum(-0, +0) = -0."""
    return _binary("minimum", a, b)


def relu(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """max(x, 0) (relu(-0) = -0, as torch)."""
    return _unary("relu", x)


_GELU = {"none": "gelu", "tanh": "gelu_tanh"}


def gelu(x: Tensor[Unpack[_Shape]], approximate: str = "none") -> Tensor[Unpack[_Shape]]:
    """x·Φ(x); approximate="tanh" is the tanh form (op gelu_tanh), as torch names them.
    Another `approximate` raises InvalidArgumentError."""
    name = _GELU.get(approximate) if isinstance(approximate, str) else None
    if name is None:
        raise errors.InvalidArgumentError(
            f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(name, x)


def silu(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """x·sigmoid(x)."""
    return _unary("silu", x)


def sigmoid(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """1 / (1 + e^-x)."""
    return _unary("sigmoid", x)


def tanh(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """tanh(x)."""
    return _unary("tanh", x)


def exp(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """e^x."""
    return _unary("exp", x)


def neg(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """-x (NaN stays the canonical NaN)."""
    return _unary("neg", x)


def abs(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:  # noqa: A001 - torch's name
    """|x|."""
    return _unary("abs", x)


def square(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """x²."""
    return _unary("square", x)


def rsqrt(x: Tensor[Unpack[_Shape]]) -> Tensor[Unpack[_Shape]]:
    """1 / √x (rsqrt(+0) = +inf, rsqrt(-0) = -inf, NaN below 0)."""
    return _unary("rsqrt", x)


# ---- fusion ---------------------------------------------------------------------------------------
def set_fusion(enabled: bool) -> None:
    """Turn the scheduler's fusion of elementwise ops into the kernel that makes their operand on
    (the default) or off, process-wide (TGRAD_FUSION=0 at start-up turns it off). Fusion never
    changes a byte; realizations already scheduled are unaffected."""
    if not isinstance(enabled, (bool, np.bool_)):
        raise errors.InvalidArgumentError(f"set_fusion: expected a bool, got {type(enabled).__name__}")
    _check(lib.tgrad_set_fusion(1 if enabled else 0))


def fusion_enabled() -> bool:
    """Whether realize fuses elementwise ops (see set_fusion)."""
    return bool(lib.tgrad_fusion_enabled())
