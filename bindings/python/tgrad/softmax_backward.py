"""The softmax kind's derivative as an op: ``softmax_backward(y, g, dim)`` = ``y * (g - sum(g * y,
dim))`` (torch's ``_softmax_backward_data``), each output the exact value of that expression on the
inputs, rounded once (docs/numerics.md, "softmax_backward"), so the bytes never depend on threads,
CPU variant or fusion. One libtgrad call (``tgrad_softmax_backward``), lazy like every op; the
gradient engine's vjp rule of softmax calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from ._ffi import ffi, lib
from .dtypes import as_dtype
from .errors import _check
from .softmax import _axis, _report

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["softmax_backward"]


def softmax_backward(y: Tensor, g: Tensor, dim: int | None = None, *, axis: int | None = None,
                     dtype: Any = None) -> Tensor:
    """y_i (g_i - sum_j g_j y_j) along dim (the last axis by default), y being softmax's output and
    g the gradient of its result; correctly rounded to dtype (g's dtype by default; bfloat16 or
    float32). y and g have one shape, each bfloat16 or float32."""
    from .tensor import Tensor

    for what, t in (("y", y), ("g", g)):
        if not isinstance(t, Tensor):
            raise errors.InvalidArgumentError(
                f"tgrad.softmax_backward: {what} must be a Tensor, got {type(t).__name__}")
    d = _axis("softmax_backward", dim, axis, -1)
    out_dtype = 0 if dtype is None else as_dtype(dtype, "tgrad.softmax_backward").code
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_softmax_backward(int(lib.TGRAD_SOFTMAX_SOFTMAX), y._h, g._h, d, out_dtype, out))
    result = Tensor._wrap(int(out[0]), None)
    _report("softmax_backward", result, y, {"dim": d, "dtype": result.dtype})
    return result
