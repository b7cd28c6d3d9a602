"""Comparisons, selection and logic: ``a == b``, ``a < b``, ..., ``tgrad.where``, ``masked_fill``,
``&  |  ^  ~`` on bool tensors, and ``tgrad.logical_and/or/xor/not``.

    mask = scores > 0                     # a tgrad.bool tensor
    y = tgrad.where(mask, x, 0.0)         # x where mask, else 0
    s = s.masked_fill(~causal, float("-inf"))

A comparison is one libtgrad call (``tgrad_compare``, kind ``compare``): elementwise with numpy
broadcasting, lazily, giving a ``tgrad.bool`` tensor (one byte per element, 0 or 1). It is exact:
the operands' values are compared as IEEE 754 compares (NaN is unequal to everything, itself
included, so only ``!=`` holds; ``-0 == +0``), and operands of different dtypes (bfloat16,
float32, int32, bool) are compared by their exact values, never rounded to a common type. A Python
number stands for a 0-d tensor of the other operand's dtype, rounded once to it as in the
arithmetic operators (torch's and numpy's rule: ``x_bf16 < 0.1`` compares with bf16(0.1)); with an
int32 or bool tensor, an int is an int32 (float32 past int32's range, which no int32 value
reaches) and a float is a float32.

``where(cond, a, b)`` is one call (``tgrad_where``, kind ``where``): cond is a bool tensor (torch's
rule: another dtype raises DtypeUnsupportedError; compare it first, ``x != 0``), a and b are
tensors or numbers, all three broadcast together; each element is a's or b's bits, unchanged.
Tensors of different dtypes are promoted as torch promotes (bool < int32 < bfloat16 < float32,
by an exact or correctly rounded cast); a number takes the other value's dtype (a float with an
int32 or bool tensor makes both float32); two numbers give bool, int32 or bfloat16 (tgrad's
default float). The logical ops are compositions: ``a & b`` is ``where(a, b, False)``, ``a | b``
is ``where(a, True, b)``, ``a ^ b`` is ``a != b`` and ``~a`` is ``a == False``, on bool tensors
(the operators refuse other dtypes with DtypeUnsupportedError; the ``logical_*`` functions take
any dtype as ``x != 0``, NaN true).

On GPU devices the compare and where routes run them with the CPU's bytes (docs/kernels.md); a
where whose operands need a cast to or from int32 or bool is refused there (DtypeUnsupportedError:
such casts stay on the CPU). While
tgrad.trace records, comparisons are reported under their names ("eq", ..., "ge") and where as
"where"; validation replays them with numpy (tgrad.trace_kinds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _bf16
from . import dtypes as _dtypes
from . import errors
from . import ops as _ops
from ._ffi import lib
from .tensor import _RECORDER, Tensor, _new_handle, _reports

__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill", "logical_and", "logical_or",
           "logical_xor", "logical_not", "any", "all"]

_CODES = {"eq": int(lib.TGRAD_COMPARE_EQ), "ne": int(lib.TGRAD_COMPARE_NE), "lt": int(lib.TGRAD_COMPARE_LT),
          "le": int(lib.TGRAD_COMPARE_LE), "gt": int(lib.TGRAD_COMPARE_GT), "ge": int(lib.TGRAD_COMPARE_GE)}
#: torch's promotion order of tgrad's dtypes (a cast to the higher one is exact or rounds once).
_RANK = {_dtypes.bool_.code: 0, _dtypes.int32.code: 1, _dtypes.bfloat16.code: 2, _dtypes.float32.code: 3}
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


# ---- numbers as operands ----------------------------------------------------------------------------
def _number_kind(value: object) -> str | None:
    """"bool", "int" or "float" for a real number (numpy scalars too); None for anything else."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)) or (isinstance(value, np.generic) and _bf16.is_bf16(value.dtype)):
        return "float"
    if isinstance(value, (complex, np.complexfloating)):
        raise errors.DtypeUnsupportedError(f"a {type(value).__name__} operand is not supported (real numbers only)")
    return None


def _number_dtype(value: object, like: _dtypes.DType | None, name: str) -> _dtypes.DType:
    """The dtype a number takes next to a tensor of dtype `like` (None: next to another number)."""
    kind = _number_kind(value)
    if kind is None:
        raise errors.InvalidArgumentError(f"{name}: an operand must be a Tensor or a real number, got {type(value).__name__}")
    if like is not None and like.is_floating_point:
        return like
    if kind == "float":
        return _dtypes.float32 if like is not None else _dtypes.bfloat16
    if kind == "int" and (like is None or like is _dtypes.int32 or like is _dtypes.bool_):
        return _dtypes.int32 if _INT32_MIN <= int(value) <= _INT32_MAX else _dtypes.float32  # type: ignore[call-overload]
    return _dtypes.bool_  # a bool next to a bool tensor or another bool


def _constant(value: object, dtype: _dtypes.DType, device: str) -> Tensor:
    """The 0-d tensor of a number in `dtype`, rounded once (recorded by tgrad.trace as a constant)."""
    host: np.ndarray[Any, Any] | None
    if dtype is _dtypes.bool_:
        host = np.array(bool(value))
    elif dtype is _dtypes.int32:
        host = np.array(int(value), np.int32)  # type: ignore[call-overload]
    else:
        host = _ops._host_array(value)  # float64 (ints rounded to odd past 2^53), float32 or bfloat16: one rounding
    if host is None:
        raise errors.InvalidArgumentError(f"an operand must be a Tensor or a real number, got {type(value).__name__}")
    return Tensor.from_numpy(host, device=device, dtype=dtype)


class _Operands:
    """Tensors made for numbers and casts while one call runs; released after it (the node holds
    their buffers), unless tgrad.trace holds them as recorded ops."""

    def __init__(self) -> None:
        self.made: list[Tensor] = []

    def keep(self, t: Tensor) -> Tensor:
        self.made.append(t)
        return t

    def __enter__(self) -> _Operands:
        return self

    def __exit__(self, *exc: object) -> None:
        if _RECORDER.get() is None:
            for t in self.made:
                t.release()


def _tensor_of(value: Any, dtype: _dtypes.DType, device: str, made: _Operands) -> Tensor:
    """`value` as a tensor of `dtype`: a number made so, a tensor cast (when it differs)."""
    if isinstance(value, Tensor):
        return value if value.dtype is dtype else made.keep(value.to(dtype))
    return made.keep(_constant(value, dtype, device))


# ---- comparisons -----------------------------------------------------------------------------------
def _is_comparable(value: object) -> bool:
    """Whether a comparison operator takes `value` (else NotImplemented: `t == "a"` is False, by
    identity; a complex number is taken, and refused with DtypeUnsupportedError as in arithmetic)."""
    return _ops._is_operand(value)


def _compare(name: str, a: Any, b: Any) -> Tensor:
    if not (isinstance(a, Tensor) or isinstance(b, Tensor)):
        raise errors.InvalidArgumentError(
            f"{name}: at least one operand must be a Tensor, got {type(a).__name__} and {type(b).__name__}")
    like: Tensor = a if isinstance(a, Tensor) else b
    with _Operands() as made:
        x = a if isinstance(a, Tensor) else made.keep(_constant(a, _number_dtype(a, like.dtype, name), like.device))
        y = b if isinstance(b, Tensor) else made.keep(_constant(b, _number_dtype(b, like.dtype, name), like.device))
        return _run_compare(name, x, y)


def _runner(name: str) -> Any:
    code = _CODES[name]

    def run(a: Tensor, b: Tensor) -> Tensor:
        return Tensor._wrap(_new_handle(lib.tgrad_compare, code, a._h, b._h))

    run.__name__ = name
    return _reports(name)(run)


_RUNNERS = {name: _runner(name) for name in _CODES}


def _run_compare(name: str, a: Tensor, b: Tensor) -> Tensor:
    result: Tensor = _RUNNERS[name](a, b)
    return result


def eq(a: Any, b: Any) -> Tensor:
    """a == b elementwise (bool; NaN == NaN is False, -0 == +0 is True)."""
    return _compare("eq", a, b)


def ne(a: Any, b: Any) -> Tensor:
    """a != b elementwise (bool; True wherever either is NaN)."""
    return _compare("ne", a, b)


def lt(a: Any, b: Any) -> Tensor:
    """a < b elementwise (bool; False wherever either is NaN)."""
    return _compare("lt", a, b)


def le(a: Any, b: Any) -> Tensor:
    """a <= b elementwise (bool; False wherever either is NaN)."""
    return _compare("le", a, b)


def gt(a: Any, b: Any) -> Tensor:
    """a > b elementwise (bool; False wherever either is NaN)."""
    return _compare("gt", a, b)


def ge(a: Any, b: Any) -> Tensor:
    """a >= b elementwise (bool; False wherever either is NaN)."""
    return _compare("ge", a, b)


# ---- where -----------------------------------------------------------------------------------------
@_reports("where")
def _run_where(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return Tensor._wrap(_new_handle(lib.tgrad_where, cond._h, a._h, b._h))


def _values_dtype(a: Any, b: Any) -> _dtypes.DType:
    """The result dtype of where's values (see the module's docstring)."""
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta and tb:
        da: _dtypes.DType = a.dtype
        db: _dtypes.DType = b.dtype
        return da if _RANK[da.code] >= _RANK[db.code] else db
    if ta or tb:
        t, n = (a, b) if ta else (b, a)
        d = _number_dtype(n, t.dtype, "where")
        return d if _RANK[d.code] >= _RANK[t.dtype.code] else t.dtype
    da, db = _number_dtype(a, None, "where"), _number_dtype(b, None, "where")
    return da if _RANK[da.code] >= _RANK[db.code] else db


def where(cond: Tensor, a: Any, b: Any) -> Tensor:
    """cond ? a : b elementwise, with broadcasting of all three (see the module's docstring)."""
    if not isinstance(cond, Tensor):
        raise errors.InvalidArgumentError(f"where: the condition must be a bool Tensor, got {type(cond).__name__}")
    if cond.dtype is not _dtypes.bool_:
        raise errors.DtypeUnsupportedError(
            f"where: the condition is {cond.dtype}; it must be bool (compare it first, e.g. x != 0)")
    dtype = _values_dtype(a, b)
    with _Operands() as made:
        x = _tensor_of(a, dtype, cond.device, made)
        y = _tensor_of(b, dtype, cond.device, made)
        return _run_where(cond, x, y)


def masked_fill(x: Tensor, mask: Tensor, value: Any) -> Tensor:
    """x with `value` where mask is True (torch's Tensor.masked_fill): where(mask, value, x), the
    value in x's dtype (a number rounded once to it; a 0-d tensor cast to it)."""
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"masked_fill: expected a Tensor, got {type(x).__name__}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise errors.InvalidArgumentError(f"masked_fill: the value must be a number or a 0-d tensor, "
                                          f"got shape {value.shape}")
    if not isinstance(value, Tensor) and _number_kind(value) is None:
        raise errors.InvalidArgumentError(f"masked_fill: the value must be a number, got {type(value).__name__}")
    if not isinstance(mask, Tensor):
        raise errors.InvalidArgumentError(f"masked_fill: the mask must be a bool Tensor, got {type(mask).__name__}")
    if mask.dtype is not _dtypes.bool_:
        raise errors.DtypeUnsupportedError(f"masked_fill: the mask is {mask.dtype}; it must be bool")
    with _Operands() as made:
        if isinstance(value, Tensor):
            v = _tensor_of(value, x.dtype, x.device, made)
        else:
            v = made.keep(_constant(value, x.dtype, x.device))
        return where(mask, v, x)


# ---- logic -----------------------------------------------------------------------------------------
def _truth(x: Any, name: str, made: _Operands) -> Any:
    """x as a bool tensor (x != 0), or a bool number as itself."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"{name}: expected a Tensor or a bool, got {type(x).__name__}")
    return x if x.dtype is _dtypes.bool_ else made.keep(ne(x, 0))


def _pair(a: Any, b: Any, name: str, made: _Operands) -> tuple[Tensor, Any]:
    """Both operands as truths, a tensor first (and, or and xor are symmetric)."""
    x, y = _truth(a, name, made), _truth(b, name, made)
    if not isinstance(x, Tensor):
        x, y = y, x
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"{name}: at least one operand must be a Tensor")
    return x, y


def logical_not(x: Tensor) -> Tensor:
    """not x, elementwise: x == 0 (bool; any dtype, NaN is true so its not is False)."""
    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"logical_not: expected a Tensor, got {type(x).__name__}")
    return eq(x, False if x.dtype is _dtypes.bool_ else 0)


def logical_and(a: Any, b: Any) -> Tensor:
    """a and b, elementwise with broadcasting (bool; any dtype as x != 0)."""
    with _Operands() as made:
        x, y = _pair(a, b, "logical_and", made)
        return where(x, y, False)


def logical_or(a: Any, b: Any) -> Tensor:
    """a or b, elementwise with broadcasting (bool; any dtype as x != 0)."""
    with _Operands() as made:
        x, y = _pair(a, b, "logical_or", made)
        return where(x, True, y)


def logical_xor(a: Any, b: Any) -> Tensor:
    """a xor b, elementwise with broadcasting (bool; any dtype as x != 0)."""
    with _Operands() as made:
        x, y = _pair(a, b, "logical_xor", made)
        return ne(x, y)


def _bool_operand(x: Any, op: str) -> bool:
    """Whether x may stand beside a bool tensor in `op` (& | ^): a bool tensor or a bool number;
    a tensor of another dtype raises DtypeUnsupportedError (tgrad has no bitwise integer ops)."""
    if isinstance(x, Tensor):
        if x.dtype is not _dtypes.bool_:
            raise errors.DtypeUnsupportedError(f"{op}: operands must be bool tensors, got {x.dtype} "
                                               "(tgrad has no bitwise integer ops; compare first)")
        return True
    return isinstance(x, (bool, np.bool_))


def bitwise(op: str, a: Any, b: Any) -> Any:
    """The operators & | ^ on bool tensors (NotImplemented for an operand that is not one)."""
    if not (_bool_operand(a, op) and _bool_operand(b, op)):
        return NotImplemented
    if op == "&":
        return logical_and(a, b)
    if op == "|":
        return logical_or(a, b)
    return logical_xor(a, b)


def invert(x: Tensor) -> Tensor:
    """~x for a bool tensor (DtypeUnsupportedError for another dtype)."""
    _bool_operand(x, "~")
    return eq(x, False)


# ---- bool reductions -------------------------------------------------------------------------------
_EXACT_COUNT = 1 << 24  # float32 holds every count up to 2^24 exactly


def _reduced_count(x: Tensor, axis: Any, dim: Any) -> int:
    from .reductions import _axes

    axes = _axes("sum", axis, dim)
    shape = x.shape
    count = 1
    for a in range(len(shape)) if axes is None else axes:
        if -len(shape) <= a < len(shape):
            count *= shape[a]
    return count


def reduce_bool(name: str, x: Tensor, axis: Any, keepdims: Any, dtype: Any, dim: Any, keepdim: Any) -> Tensor:
    """A reduction of a bool tensor, numpy's way where cheap: sum gives the int32 count (exact up
    to 2^24 per output; more raises DtypeUnsupportedError: cast to float32 and sum), or the sum in
    the dtype asked for; mean the float32 (or asked) mean of the 0/1 values; max and min a bool;
    argmax and argmin the index. Each is a composition of casts and tgrad's exact reductions."""
    from . import reductions as _red

    with _Operands() as made:
        if name in ("sum", "mean"):
            want = None if dtype is None else _dtypes.as_dtype(dtype, f"tgrad.{name}")
            if name == "sum" and (want is None or want is _dtypes.int32):
                if _reduced_count(x, axis, dim) > _EXACT_COUNT:
                    raise errors.DtypeUnsupportedError(
                        f"sum: a bool tensor's count over more than 2^24 elements per output is not "
                        f"computed exactly here; cast it to float32 and sum (shape {x.shape})")
                total = made.keep(_red.reduce("sum", made.keep(x.to(_dtypes.float32)), axis, keepdims,
                                              _dtypes.float32, dim, keepdim))
                return total.to(_dtypes.int32)
            return _red.reduce(name, made.keep(x.to(_dtypes.float32)), axis, keepdims,
                               want or _dtypes.float32, dim, keepdim)
        if dtype is not None:
            raise errors.InvalidArgumentError(f"{name}: dtype is not taken for a bool tensor")
        values = made.keep(x.to(_dtypes.bfloat16))
        if name in ("argmax", "argmin"):
            return _red.reduce(name, values, axis, keepdims, None, dim, keepdim)
        return made.keep(_red.reduce(name, values, axis, keepdims, None, dim, keepdim)).to(_dtypes.bool_)


def any(x: Tensor, axis: Any = None, keepdims: bool = False, *, dim: Any = None,  # noqa: A001 - numpy's name
        keepdim: bool | None = None) -> Tensor:
    """Whether any element is true (nonzero; NaN is true) over axis (every axis by default); False
    for an empty set. The exact count of true elements compared with 0."""
    from . import reductions as _red

    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"any: expected a Tensor, got {type(x).__name__}")
    with _Operands() as made:
        truth = made.keep(_truth(x, "any", made).to(_dtypes.float32))
        count = made.keep(_red.reduce("sum", truth, axis, keepdims, _dtypes.float32, dim, keepdim))
        return gt(count, 0)  # a positive exact count never rounds to 0


def all(x: Tensor, axis: Any = None, keepdims: bool = False, *, dim: Any = None,  # noqa: A001 - numpy's name
        keepdim: bool | None = None) -> Tensor:
    """Whether every element is true (nonzero; NaN is true) over axis; True for an empty set."""
    from . import reductions as _red

    if not isinstance(x, Tensor):
        raise errors.InvalidArgumentError(f"all: expected a Tensor, got {type(x).__name__}")
    with _Operands() as made:
        falsity = made.keep(made.keep(logical_not(x)).to(_dtypes.float32))
        count = made.keep(_red.reduce("sum", falsity, axis, keepdims, _dtypes.float32, dim, keepdim))
        return eq(count, 0)
