"""The softmax kind's derivatives as ops: ``softmax_backward(y, g, dim)`` = ``y * (g - sum(g * y,
dim))`` (torch's ``_softmax_backward_data``) and ``log_softmax_backward(z, g, dim)`` = ``g - exp(z) *
sum(g, dim)`` (torch's ``_log_softmax_backward_data``), each output the exact value of that
expression on the inputs, rounded once (docs/numerics.md, "softmax_backward,
log_softmax_backward"), so the bytes never depend on threads, CPU variant or fusion. One libtgrad
call (``tgrad_softmax_backward``), lazy like every op; the gradient engine's vjp rules of softmax
and log_softmax call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from ._ffi import ffi, lib
from .dtypes import as_dtype
from .errors import _check
from .softmax import _axis

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["softmax_backward", "log_softmax_backward"]


def softmax_backward(y: Tensor, g: Tensor, dim: int | None = None, *, axis: int | None = None,
                     dtype: Any = None) -> Tensor:
    """y_i (g_i - sum_j g_j y_j) along dim (the last axis by default), y being softmax's output and
    g the gradient of its result; correctly rounded to dtype (g's dtype by default; bfloat16 or
    float32). y and g have one shape, each bfloat16 or float32."""
    return _run("softmax_backward", int(lib.TGRAD_SOFTMAX_SOFTMAX), y, g, dim, axis, dtype)


def _run(name: str, op: int, y: Any, g: Any, dim: Any, axis: Any, dtype: Any) -> Tensor:
    from .tensor import Tensor

    for what, t in (("the forward output", y), ("g", g)):
        if not isinstance(t, Tensor):
            raise errors.InvalidArgumentError(f"tgrad.{name}: {what} must be a Tensor, got {type(t).__name__}")
    d = _axis(name, dim, axis, -1)
    out_dtype = 0 if dtype is None else as_dtype(dtype, f"tgrad.{name}").code
    out = ffi.new("tgrad_tensor_t *")
    _check(lib.tgrad_softmax_backward(op, y._h, g._h, d, out_dtype, out))
    result = Tensor._wrap(int(out[0]), None)
    from .tensor import _RECORDER

    recorder = _RECORDER.get()  # tgrad.trace's, while one runs: replayed by the exact references
    if recorder is not None:
        recorder.report(name, result, (y, g), {"dim": d, "dtype": result.dtype})
    return result

def log_softmax_backward(z: Tensor, g: Tensor, dim: int | None = None, *, axis: int | None = None,
                         dtype: Any = None) -> Tensor:
    """g_i - exp(z_i) sum_j g_j along dim (the last axis by default), z being log_softmax's output
    and g the gradient of its result (torch's ``_log_softmax_backward_data``); correctly rounded to
    dtype (g's dtype by default; bfloat16 or float32). z and g have one shape, each bfloat16 or
    float32."""
    return _run("log_softmax_backward", int(lib.TGRAD_SOFTMAX_LOG_SOFTMAX), z, g, dim, axis, dtype)
